#!/bin/sh
# A worker with descendants, for the fault tests. It starts a child (which shares the worker's
# process group and its stdout/stderr pipes) and a double-forked grandchild that calls setsid (a
# daemon: another session and process group, re-parented away from the worker), prints
#   tree rank=<RANK> child=<pid> orphan=<pid>
# and then execs "$@", the worker proper, under the same pid.
sleep 300 &
child=$!
orphan=$(setsid sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!' </dev/null)
echo "tree rank=$RANK child=$child orphan=$orphan"
exec "$@"
