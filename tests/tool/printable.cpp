// Text from input files printed by the moepolicy tool (examples/moepolicy/printable.hpp):
// control characters become escapes, everything else stays as it is.
#include "printable.hpp"

#include <doctest/doctest.h>

#include <string>

using moepolicy::tool::printable;

TEST_CASE("plain text and UTF-8 pass unchanged") {
  CHECK(printable("ibm-granite/granite-3.1-1b-a400m-instruct") == "ibm-granite/granite-3.1-1b-a400m-instruct");
  CHECK(printable("") == "");
  CHECK(printable("Müller, 東京, \xF0\x9F\x98\x80") == "Müller, 東京, \xF0\x9F\x98\x80");
  CHECK(printable("\xC2\xA0nbsp") == "\xC2\xA0nbsp");  // U+00A0 is not a control character
}

TEST_CASE("C0 controls, DEL and backslashes are escaped") {
  CHECK(printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(printable("\x1b]0;title\x07") == "\\x1b]0;title\\x07");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("line\nbreak\r\t") == "line\\x0abreak\\x0d\\x09");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("a\\x1b") == "a\\\\x1b");  // an escape in the text stays distinguishable
}

TEST_CASE("C1 controls and bytes that are not UTF-8 are escaped") {
  CHECK(printable("\xC2\x9B" "2J") == "\\u009b2J");  // CSI
  CHECK(printable("\xC2\x80") == "\\u0080");
  CHECK(printable("\x9b" "2J") == "\\x9b2J");  // a lone continuation byte (CSI in 8-bit terminals)
  CHECK(printable("\xC3") == "\\xc3");         // cut sequence
  CHECK(printable("\xC0\xAF") == "\\xc0\\xaf");  // overlong
  CHECK(printable("\xE0\x80\xAF") == "\\xe0\\x80\\xaf");
  CHECK(printable("\xED\xA0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(printable("\xF4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  CHECK(printable("\xFF") == "\\xff");
}
