// Slurm hostlist and tasks-per-node expansion (the expected lists are what Slurm 22.05's
// `scontrol show hostnames` prints; tests/slurm compares against scontrol itself).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "launcher/hostlist.h"

using crun::expand_hostlist;
using crun::expand_tasks_per_node;
using Hosts = std::vector<std::string>;

TEST_CASE("hostlist: ranges, lists, padding, products", "[hostlist]") {
  CHECK(expand_hostlist("gpu[01-04,07],cpu3") == Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"});
  CHECK(expand_hostlist("a[0-1].b[2-3]") == Hosts{"a0.b2", "a0.b3", "a1.b2", "a1.b3"});
  CHECK(expand_hostlist("x[009-011]") == Hosts{"x009", "x010", "x011"});
  CHECK(expand_hostlist("p[8-11]") == Hosts{"p8", "p9", "p10", "p11"});
  CHECK(expand_hostlist("p[1-03]") == Hosts{"p1", "p2", "p3"});
  CHECK(expand_hostlist("x[0-1][2-3]") == Hosts{"x02", "x03", "x12", "x13"});
  CHECK(expand_hostlist("a,b,a") == Hosts{"a", "b", "a"});
  CHECK(expand_hostlist("q[1,1-2]") == Hosts{"q1", "q1", "q2"});
  CHECK(expand_hostlist("n1,,n2 n3") == Hosts{"n1", "n2", "n3"});
  CHECK(expand_hostlist("[1-2]") == Hosts{"1", "2"});
  CHECK(expand_hostlist("node[1-2]-ib") == Hosts{"node1-ib", "node2-ib"});  // newer Slurm's suffixes
  CHECK(expand_hostlist("").empty());
}

TEST_CASE("hostlist: malformed expressions name the problem", "[hostlist]") {
  CHECK_THROWS_WITH(expand_hostlist("h[3-1]"), Catch::Contains("backwards"));
  CHECK_THROWS_WITH(expand_hostlist("h[1-2"), Catch::Contains("'[' without ']'"));
  CHECK_THROWS_WITH(expand_hostlist("h[1-2]]"), Catch::Contains("']' without '['"));
  CHECK_THROWS_WITH(expand_hostlist("h[a-b]"), Catch::Contains("'a' is not a number"));
  CHECK_THROWS_WITH(expand_hostlist("h[]"), Catch::Contains("empty brackets"));
  CHECK_THROWS_WITH(expand_hostlist("h[1,]"), Catch::Contains("empty range"));
  CHECK_THROWS_WITH(expand_hostlist("h[0-99999999]"), Catch::Contains("too large"));
  CHECK_THROWS_WITH(expand_hostlist("h[0-999][0-999][0-9]"), Catch::Contains("more than"));
}

TEST_CASE("hostlist: sizes are bounded before anything is expanded", "[hostlist]") {
  // Host count: every item and bracket adds up, whatever the order (the e2e test
  // tests/launcher/hostlist_memory.sh runs the hostile ones under a memory limit).
  CHECK(expand_hostlist("n[0-1048575]").size() == crun::kMaxHosts);
  CHECK_THROWS_WITH(expand_hostlist("n[0-1048575],m"), Catch::Contains("more than 1048576 hosts"));
  CHECK_THROWS_WITH(expand_hostlist("m,n[0-1048575]"), Catch::Contains("more than 1048576 hosts"));
  CHECK_THROWS_WITH(expand_hostlist("n[0-1048575,0]"), Catch::Contains("more than 1048576 hosts"));
  CHECK_THROWS_WITH(expand_hostlist("n[0-1023][0-1024]"), Catch::Contains("more than 1048576 hosts"));
  CHECK_THROWS_WITH(expand_hostlist("n[0-1048575][0-1048575][0-1048575][0-1048575]"), Catch::Contains("more than"));
  // Name length: zero padding counts; 255 characters is the most.
  const std::string zeros(253, '0');
  CHECK(expand_hostlist("n[" + zeros + "1-2]") == Hosts{"n" + zeros + "1", "n" + zeros + "2"});
  CHECK_THROWS_WITH(expand_hostlist("n[0" + zeros + "1-2]"), Catch::Contains("longer than 255 characters"));
  CHECK_THROWS_WITH(expand_hostlist("n[" + std::string(4000, '0') + "-3]"), Catch::Contains("longer than 255"));
  CHECK_THROWS_WITH(expand_hostlist(std::string(256, 'h')), Catch::Contains("longer than 255"));
  CHECK(expand_hostlist("h[1-2]" + std::string(253, 'x')).size() == 2);
  // All names together: at most 64 MiB.
  CHECK_THROWS_WITH(expand_hostlist("n[0-1048575]" + std::string(200, 'x')), Catch::Contains("more than 64 MiB"));
  // The largest value and a range ending at it.
  CHECK(expand_hostlist("n[18446744073709551614-18446744073709551615]") ==
        Hosts{"n18446744073709551614", "n18446744073709551615"});
  CHECK_THROWS_WITH(expand_hostlist("n[18446744073709551616]"), Catch::Contains("is not a number"));
  // A long expression is quoted by its start only.
  std::string long_bad = "x" + std::string(5000, 'y') + "[";
  CHECK_THROWS_WITH(expand_hostlist(long_bad), Catch::Contains("...': '[' without ']'"));
}

TEST_CASE("hostlist: hostlist_size counts without expanding", "[hostlist]") {
  for (const std::string e : {"gpu[01-04,07],cpu3", "a[0-1].b[2-3]", "x[0-1][2-3]", "n1,,n2 n3", "", "p[8-11]"}) {
    const auto hosts = expand_hostlist(e);
    const auto size = crun::hostlist_size(e);
    CHECK(size.hosts == hosts.size());
    std::size_t bytes = 0;
    for (const auto& h : hosts) bytes += h.size() + 1;
    CHECK(size.bytes >= bytes);
  }
  CHECK(crun::hostlist_size("n[0-1048575]").hosts == crun::kMaxHosts);
  CHECK_THROWS_WITH(crun::hostlist_size("n[0-1048575,0]"), Catch::Contains("more than 1048576 hosts"));
  CHECK_THROWS_WITH(crun::hostlist_size("h[3-1]"), Catch::Contains("backwards"));
}

TEST_CASE("tasks per node: SLURM_TASKS_PER_NODE's N(xK) lists", "[hostlist]") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK_THROWS(expand_tasks_per_node(""));
  CHECK_THROWS(expand_tasks_per_node("2(x"));
  CHECK_THROWS(expand_tasks_per_node("a"));
  CHECK_THROWS(expand_tasks_per_node("1(x99999999999)"));
}
