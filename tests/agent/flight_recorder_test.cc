// The NCCL flight recorder's variables in the workers' environment (agent/flight_recorder.h).
#include "agent/flight_recorder.h"

#include <catch2/catch.hpp>

using namespace crun;

TEST_CASE("flight recorder: enabled only by a buffer size above 0, the newer spelling first", "[flight_recorder]") {
  CHECK_FALSE(read_flight_recorder({"PATH=/bin"}).enabled);
  CHECK(read_flight_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE=2000"}).enabled);
  CHECK(read_flight_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE= 20 "}).enabled);
  CHECK_FALSE(read_flight_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE=0"}).enabled);
  CHECK_FALSE(read_flight_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE=-5"}).enabled);
  CHECK(read_flight_recorder({"TORCH_FR_BUFFER_SIZE=10", "TORCH_NCCL_TRACE_BUFFER_SIZE=0"}).enabled);
  CHECK_FALSE(read_flight_recorder({"TORCH_FR_BUFFER_SIZE=0", "TORCH_NCCL_TRACE_BUFFER_SIZE=10"}).enabled);
  CHECK(read_flight_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE=0", "TORCH_NCCL_TRACE_BUFFER_SIZE=3"}).enabled);  // the last, as getenv
}

TEST_CASE("flight recorder: a buffer size that is not a whole number is one line, and off", "[flight_recorder]") {
  for (const char* bad : {"TORCH_NCCL_TRACE_BUFFER_SIZE=lots", "TORCH_NCCL_TRACE_BUFFER_SIZE=", "TORCH_NCCL_TRACE_BUFFER_SIZE=2e3",
                          "TORCH_NCCL_TRACE_BUFFER_SIZE=99999999999999999999"}) {
    INFO(bad);
    const auto s = read_flight_recorder({bad});
    CHECK_FALSE(s.enabled);
    CHECK(s.error.rfind(std::string(bad) + " is not a whole number", 0) == 0);
    CHECK(s.error.find('\n') == std::string::npos);
  }
  const auto newer = read_flight_recorder({"TORCH_FR_BUFFER_SIZE=x"});
  CHECK(newer.error == "TORCH_FR_BUFFER_SIZE=x is not a whole number");
}

TEST_CASE("flight recorder: the user's prefixes are read, the newer dump spelling first", "[flight_recorder]") {
  const auto none = read_flight_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE=1", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE="});
  CHECK(none.pipe_prefix.empty());
  CHECK(none.dump_prefix.empty());
  const auto both = read_flight_recorder({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/p/pipe_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/d/old_",
                                          "TORCH_FR_DUMP_TEMP_FILE=/d/new_"});
  CHECK(both.pipe_prefix == "/p/pipe_");
  CHECK(both.dump_prefix == "/d/new_");
  CHECK(read_flight_recorder({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/d/old_"}).dump_prefix == "/d/old_");
}

TEST_CASE("flight recorder: crun's prefixes replace earlier ones; the file names are torch's", "[flight_recorder]") {
  std::vector<std::string> env{"A=1", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/old/", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/keep/"};
  set_flight_recorder(env, "/run/attempt_1/flight_recorder/nccl_trace_rank_", "");
  CHECK(env == std::vector<std::string>{"A=1", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/keep/",
                                        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/run/attempt_1/flight_recorder/nccl_trace_rank_"});
  set_flight_recorder(env, "/p_", "/d_");
  CHECK(env == std::vector<std::string>{"A=1", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/p_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/d_"});
  CHECK(flight_pipe_file("/x/nccl_trace_rank_", 12) == "/x/nccl_trace_rank_12.pipe");
  CHECK(flight_dump_file("/x/nccl_trace_rank_", 12) == "/x/nccl_trace_rank_12");
}
