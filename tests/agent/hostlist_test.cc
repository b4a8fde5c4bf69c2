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

TEST_CASE("tasks per node: SLURM_TASKS_PER_NODE's N(xK) lists", "[hostlist]") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK_THROWS(expand_tasks_per_node(""));
  CHECK_THROWS(expand_tasks_per_node("2(x"));
  CHECK_THROWS(expand_tasks_per_node("a"));
  CHECK_THROWS(expand_tasks_per_node("1(x99999999999)"));
}
