// store/store_protocol: the wire format's writer and reader, byte for byte (no session, no
// socket): little-endian fields, length-prefixed strings, frames whose length is patched in,
// and a reader that never reads past the body.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "store/store_protocol.h"

using namespace crun::wire;

TEST_CASE("the writer lays out little-endian fields and length-prefixed strings", "[protocol]") {
  std::string out;
  Writer w(out);
  w.u8(0xAB);
  w.u16(0x0102);
  w.u32(0x01020304);
  w.i64(-2);
  w.str("hi");
  const std::string expected = std::string("\xAB", 1) + std::string("\x02\x01", 2) + std::string("\x04\x03\x02\x01", 4) +
                               std::string("\xFE\xFF\xFF\xFF\xFF\xFF\xFF\xFF", 8) + std::string("\x02\x00\x00\x00", 4) + "hi";
  CHECK(out == expected);

  Reader r(out);
  CHECK(r.u8() == 0xAB);
  CHECK(r.u16() == 0x0102);
  CHECK(r.u32() == 0x01020304u);
  CHECK(r.i64() == -2);
  CHECK(r.str() == "hi");
  CHECK(r.done());
  CHECK_NOTHROW(r.expect_done());
}

TEST_CASE("a frame's length is patched in and read back within a bound", "[protocol]") {
  std::string out;
  Writer w(out);
  const auto at = w.begin_frame(7, 42);
  w.str("key");
  w.finish_frame(at);
  REQUIRE(out.size() == kFrameHeaderSize + 1 + 4 + 4 + 3);
  const std::uint32_t len = decode_frame_length(out.data(), 1024);
  CHECK(len == out.size() - kFrameHeaderSize);
  CHECK_THROWS_AS(decode_frame_length(out.data(), len - 1), ProtocolError);  // over the bound

  Reader body(std::string_view(out).substr(kFrameHeaderSize));
  CHECK(body.u8() == 7);
  CHECK(body.u32() == 42u);
  CHECK(body.str() == "key");
  CHECK(body.done());
}

TEST_CASE("the reader refuses truncated fields, oversized strings and counts, trailing bytes", "[protocol]") {
  CHECK_THROWS_AS(Reader(std::string("\x01\x02", 2)).u32(), ProtocolError);
  std::string s;
  Writer(s).u32(100);  // a string claiming 100 bytes, with 3
  s += "abc";
  CHECK_THROWS_AS(Reader(s).str(), ProtocolError);

  std::string c;
  Writer cw(c);
  cw.u32(1000);  // 1,000 items of at least 4 bytes in a 4-byte remainder
  cw.u32(0);
  CHECK_THROWS_AS(Reader(c).count(4), ProtocolError);
  Reader ok(c);
  ok.u32();
  CHECK(ok.u32() == 0u);

  const std::string two("\x01\x02", 2);  // a Reader views its body: the string must outlive it
  Reader extra(two);
  extra.u8();
  CHECK_THROWS_AS(extra.expect_done(), ProtocolError);
}

TEST_CASE("the client preamble: magic, version, token length, token", "[protocol]") {
  const std::string hello = encode_hello("tok");
  REQUIRE(hello.size() == kPreambleSize + 3);
  Reader r(hello);
  CHECK(r.u32() == kMagic);
  CHECK(r.u16() == kVersion);
  CHECK(r.u16() == 3);
  CHECK(hello.substr(kPreambleSize) == "tok");
}
