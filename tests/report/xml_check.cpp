// The test-support XML well-formedness checker: valid documents pass, each class of
// malformation fails on the right line.
#include "xml_check.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

using moepolicy::test::check_xml;
using moepolicy::test::xml_result;

namespace {

/// Checks that `doc` is rejected on `line` with an error containing `part`.
void check_rejected(std::string_view doc, std::size_t line, std::string_view part) {
  const xml_result r = check_xml(doc);
  INFO("document: ", std::string(doc));
  INFO("error: ", r.error);
  CHECK_FALSE(r.ok);
  CHECK(r.line == line);
  CHECK(r.error.find(part) != std::string::npos);
}

}  // namespace

TEST_CASE("a full document passes, counting its elements and naming its root") {
  const std::string doc =
      "\xEF\xBB\xBF<?xml version=\"1.0\" encoding='UTF-8' standalone=\"no\"?>\n"
      "<!-- a comment - with a dash -->\n"
      "<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" \"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n"
      "<?xml-stylesheet href=\"a.css\" type=\"text/css\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width='10'>\n"
      "  <title>a &lt; b &amp; &quot;c&quot; &apos;d&apos; &gt; e &#65;&#x42;&#x1F600; \xC3\xA9\xE2\x82\xAC</title>\n"
      "  <g class=\"x\" data-a:b_c.d-e=\"1 &amp; 2\"><rect/><rect width=\"1\" /></g>\n"
      "  <text><![CDATA[ <not a tag> & ]] ]]></text>\n"
      "  <?pi some data?>\n"
      "  <!---->\n"
      "</svg >\n"
      "<!-- trailing comment -->\n";
  const xml_result r = check_xml(doc);
  INFO(r.error, " on line ", r.line);
  CHECK(r.ok);
  CHECK(r.error.empty());
  CHECK(r.line == 0);
  CHECK(r.elements == 6);
  CHECK(r.root == "svg");
}

TEST_CASE("minimal documents pass") {
  CHECK(check_xml("<a/>").ok);
  CHECK(check_xml("<a></a>").ok);
  CHECK(check_xml("\n\t <a>text</a>\r\n").ok);
  CHECK(check_xml("<?xml version=\"1.1\"?><a/>").ok);
  CHECK(check_xml("<!DOCTYPE a><a/>").ok);
  CHECK(check_xml("<!DOCTYPE a SYSTEM \"a.dtd\"><a/>").ok);
  CHECK(check_xml("<a b = 'x\"y' c=\"x'y\"/>").ok);
  CHECK(check_xml("<a>]]</a>").ok);
  CHECK(check_xml("<\xC3\xA9l\xC3\xA9ment/>").ok);
  const xml_result r = check_xml("<a><b><c/></b><b/></a>");
  CHECK(r.ok);
  CHECK(r.elements == 4);
  CHECK(r.root == "a");
}

TEST_CASE("deep nesting is handled without recursion") {
  std::string doc;
  for (int i = 0; i < 100000; ++i) doc += "<g>";
  for (int i = 0; i < 100000; ++i) doc += "</g>";
  const xml_result r = check_xml(doc);
  CHECK(r.ok);
  CHECK(r.elements == 100000);
}

TEST_CASE("line numbers count LF, CR LF and lone CR") {
  check_rejected("<a>\n\n<b></c></a>", 3, "end tag </c> does not match <b> opened on line 3");
  check_rejected("<a>\r\n\r\n<b></c></a>", 3, "does not match");
  check_rejected("<a>\r\r<b></c></a>", 3, "does not match");
  check_rejected("<a>\n\r\n\r<b></c></a>", 4, "does not match");
}

TEST_CASE("empty documents and missing or extra roots fail") {
  check_rejected("", 1, "empty document");
  check_rejected("\xEF\xBB\xBF", 1, "empty document");
  check_rejected("  \n ", 2, "no root element");
  check_rejected("<!-- only -->\n", 2, "no root element");
  check_rejected("<a/>\n<b/>", 2, "more than one root element");
  check_rejected("<a></a>\ntext", 2, "text after the root element");
  check_rejected("hello <a/>", 1, "text outside the root element");
  check_rejected("<a/>\n<![CDATA[x]]>", 2, "markup after the root element");
  check_rejected("<![CDATA[x]]><a/>", 1, "CDATA section outside the root element");
  check_rejected("\n</a>", 2, "end tag before any start tag");
}

TEST_CASE("unbalanced and badly nested tags fail") {
  check_rejected("<a>\n<b>\n</a>", 3, "end tag </a> does not match <b> opened on line 2");
  check_rejected("<a>\n  <b>\n", 2, "end of document inside <b> opened on line 2");
  check_rejected("<a><b></b>", 1, "end of document inside <a> opened on line 1");
  check_rejected("<a>\n</a x>", 2, "malformed end tag </a>");
  check_rejected("<a>\n</>", 2, "expected an element name after '</'");
  check_rejected("<a>\n< b/></a>", 2, "'<' not starting a tag");
  check_rejected("<a>1 < 2</a>", 1, "'<' not starting a tag");
  check_rejected("<a\n  b='1'", 1, "unterminated start tag <a>");
  check_rejected("<1a/>", 1, "expected an element name");
}

TEST_CASE("attribute syntax is checked") {
  check_rejected("<a\nb=1/>", 2, "attribute b value is not quoted");
  check_rejected("<a b='1'\n   c='2' b=\"3\"/>", 2, "duplicate attribute b in <a>");
  check_rejected("<a b='1'c='2'/>", 1, "expected white space before an attribute in <a>");
  check_rejected("<a b='x\n<y'/>", 2, "'<' in the value of attribute b");
  check_rejected("<a\n b/>", 2, "expected '='");
  check_rejected("<a b='x/>\n", 1, "unterminated value of attribute b");
  check_rejected("<a b='&amp' />", 1, "entity reference &amp without ';'");
  check_rejected("<a b='&nbsp;'/>", 1, "undefined entity &nbsp;");
  check_rejected("<a -b='1'/>", 1, "expected an attribute name or '>' in <a>");
}

TEST_CASE("references are only the five predefined entities and numeric ones") {
  check_rejected("<a>\nAT&T</a>", 2, "entity reference &T without ';'");
  check_rejected("<a>x & y</a>", 1, "'&' not starting a reference");
  check_rejected("<a>&copy;</a>", 1, "undefined entity &copy;");
  check_rejected("<a>&#;</a>", 1, "invalid character reference");
  check_rejected("<a>&#x;</a>", 1, "invalid character reference");
  check_rejected("<a>&#12a;</a>", 1, "invalid character reference");
  check_rejected("<a>&#xG;</a>", 1, "invalid character reference");
  check_rejected("<a>&#0;</a>", 1, "not allowed in XML");
  check_rejected("<a>&#x1;</a>", 1, "not allowed in XML");
  check_rejected("<a>&#xD800;</a>", 1, "not allowed in XML");
  check_rejected("<a>&#x110000;</a>", 1, "not allowed in XML");
  check_rejected("<a>&#99999999999999999999999;</a>", 1, "not allowed in XML");
  CHECK(check_xml("<a>&#9;&#x10FFFF;&#xd7ff;</a>").ok);
}

TEST_CASE("comments, CDATA and processing instructions are checked") {
  check_rejected("<a>\n<!-- a -- b --></a>", 2, "'--' inside a comment");
  check_rejected("<a><!-- a ---></a>", 1, "'--' inside a comment");
  check_rejected("<a>\n<!-- open\n\n", 2, "unterminated comment");
  check_rejected("<a>\n<![CDATA[ open\n", 2, "unterminated CDATA section");
  check_rejected("<a>\n]]></a>", 2, "']]>' in character data");
  check_rejected("<a><?xml version='1.0'?></a>", 1, "target \"xml\" is reserved");
  check_rejected("<a><?XmL x?></a>", 1, "is reserved");
  check_rejected("<a>\n<?pi\n", 2, "unterminated processing instruction");
  check_rejected("<a><?pi?x?></a>", 1, "expected white space after the processing instruction target");
  check_rejected("<a><? pi?></a>", 1, "expected a processing instruction target");
  check_rejected("<a><!ELEMENT a></a>", 1, "unexpected markup declaration");
}

TEST_CASE("the XML declaration and DOCTYPE are checked") {
  check_rejected(" <?xml version=\"1.0\"?><a/>", 1, "is reserved");
  check_rejected("<a/>\n<?xml version=\"1.0\"?>", 2, "is reserved");
  check_rejected("<?xml encoding=\"UTF-8\"?><a/>", 1, "XML declaration without version");
  check_rejected("<?xml version=\"2.0\"?><a/>", 1, "version \"2.0\" is not 1.x");
  check_rejected("<?xml version=\"1.0\" standalone=\"yes\" encoding=\"UTF-8\"?><a/>", 1, "malformed XML declaration");
  check_rejected("<?xml version=\"1.0\"encoding=\"UTF-8\"?><a/>", 1, "expected white space before encoding");
  check_rejected("<?xml version=\"1.0\" encoding=\"8bit\"?><a/>", 1, "invalid encoding name \"8bit\"");
  check_rejected("<?xml version=\"1.0\" standalone=\"maybe\"?><a/>", 1, "standalone must be \"yes\" or \"no\"");
  check_rejected("<?xml version='1.0'\n<a/>", 2, "malformed XML declaration");
  check_rejected("<!DOCTYPE a [<!ENTITY x \"y\">]><a/>", 1, "DOCTYPE internal subset is not supported");
  check_rejected("<!DOCTYPE a>\n<!DOCTYPE a><a/>", 2, "second DOCTYPE");
  check_rejected("<a/>\n<!DOCTYPE a>", 2, "DOCTYPE after the root element");
  check_rejected("<!DOCTYPE a SYSTEM><a/>", 1, "expected white space after SYSTEM");
  check_rejected("<!DOCTYPE a PUBLIC \"{x}\" \"y\"><a/>", 1, "invalid character in the public id");
  check_rejected("<!DOCTYPE a junk><a/>", 1, "malformed DOCTYPE");
}

TEST_CASE("characters must be XML characters in well-formed UTF-8") {
  check_rejected(std::string_view("<a>\n\0</a>", 9), 2, "character U+0000 is not allowed");
  check_rejected("<a>\x01</a>", 1, "character U+0001 is not allowed");
  check_rejected("<a b='\x1F'/>", 1, "character U+001F is not allowed");
  check_rejected("<a>\xFF</a>", 1, "invalid UTF-8 byte 0xFF");
  check_rejected("<a>\xC0\xAF</a>", 1, "invalid UTF-8 byte 0xC0");
  check_rejected("<a>\xE0\x80\xAF</a>", 1, "overlong UTF-8 sequence");
  check_rejected("<a>\xC3(</a>", 1, "invalid UTF-8 sequence");
  check_rejected("<a>\xE2\x82", 1, "truncated UTF-8 sequence");
  check_rejected("<a>\xED\xA0\x80</a>", 1, "character U+D800 is not allowed");
  check_rejected("<a>\xEF\xBF\xBE</a>", 1, "character U+FFFE is not allowed");
  check_rejected("<!-- \x02 --><a/>", 1, "character U+0002 is not allowed");
}
