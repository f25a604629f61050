// Memory sizes and device budgets as written on the command line and in
// configs (src/util/size.h).
#include <gtest/gtest.h>

#include <string>

#include "src/util/error.h"
#include "src/util/size.h"

namespace redwood {
namespace {

TEST(ParseSize, Good) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("512 MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_size("0.25KiB"), 256u);
  EXPECT_EQ(parse_size("1.5GB"), 1500000000u);
  EXPECT_EQ(parse_size("3kB"), 3000u);
  EXPECT_EQ(parse_size("1k"), 1024u);
  EXPECT_EQ(parse_size("1K"), 1024u);
  EXPECT_EQ(parse_size("8m"), 8ull << 20);
  EXPECT_EQ(parse_size("2T"), 2ull << 40);
  EXPECT_EQ(parse_size("2TiB"), 2ull << 40);
  EXPECT_EQ(parse_size("100B"), 100u);
  EXPECT_EQ(parse_size("7b"), 7u);
  EXPECT_EQ(parse_size(" 64MiB "), 64ull << 20);
  EXPECT_EQ(parse_size("16777215TiB"), 16777215ull << 40);  // the largest whole TiB count
}

TEST(ParseSize, Bad) {
  for (const char* s : {"",
                        " ",
                        "abc",
                        "-1GiB",
                        "+1GiB",
                        "-0",
                        "nan",
                        "NaN",
                        "inf",
                        "GiB",
                        "1e9",
                        "1.GiB",
                        ".5GiB",
                        "1.5",
                        "1.5B",
                        "1 2GiB",
                        "1.5.5G",
                        "1XB",
                        "1GiBs",
                        "1 GiB x",
                        "0x10",
                        "99999999999999999999",
                        "18446744073709551616",
                        "16777216TiB",
                        "20000000TiB"}) {
    try {
      parse_size(s, "--device-mem");
      ADD_FAILURE() << "accepted '" << s << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "invalid size '" + std::string(s) + "' for --device-mem: expected e.g. 2GiB, 512MiB");
    }
  }
}

TEST(FormatSize, Units) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(980), "980 B");
  EXPECT_EQ(format_size(3ull << 29), "1.50 GiB");
  EXPECT_EQ(format_size(512ull << 20), "512.0 MiB");
  EXPECT_EQ(format_size(1536), "1.50 KiB");
  EXPECT_EQ(parse_size(format_size(3ull << 29)), 3ull << 29);
}

TEST(ParseDeviceBudget, SizeOrSizePlusDraft) {
  DeviceBudget b = parse_device_budget("80MiB+draft");
  EXPECT_EQ(b.bytes, 80ull << 20);
  EXPECT_TRUE(b.draft_on_top);
  b = parse_device_budget("1GiB");
  EXPECT_EQ(b.bytes, 1ull << 30);
  EXPECT_FALSE(b.draft_on_top);
  for (const char* s : {"+draft", "1GiB+drafts", "1GiB+", "0", "0+draft", ""})
    EXPECT_THROW(parse_device_budget(s, "memory.device"), Error) << s;
  try {
    parse_device_budget("0", "memory.device");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "memory.device: a device budget of 0 bytes cannot hold anything (leave it out for no limit)");
  }
}

}  // namespace
}  // namespace redwood
