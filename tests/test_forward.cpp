#include <gtest/gtest.h>
TEST(Placeholder, test_forward) { GTEST_SKIP() << "being written"; }
