// A small strict XML 1.0 well-formedness checker for the tests, with no dependency.
//
// Checked: the XML declaration (only at the very start, version first, then encoding and
// standalone, in that order), an optional DOCTYPE (name and external id; an internal
// subset `[...]` is refused as unsupported), comments (no "--" inside), processing
// instructions (target not "xml" in any case), CDATA sections (inside the root only),
// elements (balanced, properly nested start and end tags, exactly one root, nothing but
// comments, PIs and white space around it), attributes (white space before each, a quoted
// value, no duplicate name in one element, no '<' in the value), references (only &lt;
// &gt; &amp; &apos; &quot; and &#N; / &#xH; naming an XML character), "]]>" outside CDATA,
// and the characters themselves: well-formed UTF-8 (an optional byte-order mark at the
// start) of XML 1.0 characters only.
//
// Names: the ASCII subset of the XML Name production (a letter, '_' or ':' first, then also
// digits, '-' and '.'); any non-ASCII character is accepted in a name without checking its
// Unicode class. Namespaces are not checked (a prefix is part of the name).
//
// Line numbers count from 1; CR LF, lone CR and LF each end a line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace moepolicy::test {

struct xml_result {
  bool ok = false;
  std::string error;         ///< empty when ok
  std::size_t line = 0;      ///< where the error is (1-based); 0 when ok
  std::size_t elements = 0;  ///< elements seen (all of them when ok)
  std::string root;          ///< the root element's name, once seen
};

namespace xml_detail {

class checker {
 public:
  explicit checker(std::string_view doc) : doc_(doc) {}

  xml_result run() {
    try {
      document();
      result_.ok = true;
      result_.line = 0;
    } catch (const failure&) {
      result_.ok = false;
    }
    return result_;
  }

 private:
  struct failure {};

  std::string_view doc_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  xml_result result_;

  [[noreturn]] void fail(const std::string& message, std::size_t line = 0) {
    result_.error = message;
    result_.line = line == 0 ? line_ : line;
    throw failure{};
  }

  [[nodiscard]] bool at_end() const { return pos_ >= doc_.size(); }
  [[nodiscard]] char peek(std::size_t ahead = 0) const {
    return pos_ + ahead < doc_.size() ? doc_[pos_ + ahead] : '\0';
  }
  [[nodiscard]] bool looking_at(std::string_view s) const { return doc_.substr(pos_).substr(0, s.size()) == s; }

  /// Consumes one character (all bytes of it), checking that it is an XML 1.0 Char in
  /// well-formed UTF-8; returns its code point.
  std::uint32_t next() {
    if (at_end()) fail("unexpected end of document");
    const auto b0 = static_cast<unsigned char>(doc_[pos_]);
    if (b0 < 0x80) {
      if (b0 < 0x20 && b0 != 0x09 && b0 != 0x0A && b0 != 0x0D) {
        fail("character U+" + hex(b0) + " is not allowed in XML");
      }
      ++pos_;
      if (b0 == 0x0A || (b0 == 0x0D && peek() != '\n')) ++line_;
      return b0;
    }
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 2;
      cp = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 3;
      cp = b0 & 0x0Fu;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 4;
      cp = b0 & 0x07u;
    } else {
      fail("invalid UTF-8 byte 0x" + hex(b0, 2));
    }
    if (pos_ + n > doc_.size()) fail("truncated UTF-8 sequence");
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(doc_[pos_ + k]);
      if ((b & 0xC0u) != 0x80u) fail("invalid UTF-8 sequence");
      cp = (cp << 6) | (b & 0x3Fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) fail("overlong UTF-8 sequence");
    if (!is_char(cp)) fail("character U+" + hex(cp) + " is not allowed in XML");
    pos_ += n;
    return cp;
  }

  static bool is_char(std::uint32_t cp) {
    return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
           (cp >= 0x10000 && cp <= 0x10FFFF);
  }

  static std::string hex(std::uint32_t v, std::size_t width = 4) {
    constexpr std::string_view digits = "0123456789ABCDEF";
    std::string s;
    do {
      s.insert(s.begin(), digits[v & 15u]);
      v >>= 4;
    } while (v != 0);
    while (s.size() < width) s.insert(s.begin(), '0');
    return s;
  }

  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  static bool is_name_start(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':' ||
           static_cast<unsigned char>(c) >= 0x80;
  }
  static bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

  /// Skips white space; returns whether there was any.
  bool space() {
    const std::size_t start = pos_;
    while (!at_end() && is_space(peek())) next();
    return pos_ != start;
  }

  void expect(std::string_view s, const std::string& what) {
    if (!looking_at(s)) fail("expected " + what);
    for (std::size_t i = 0; i < s.size(); ++i) next();
  }

  std::string name(const std::string& what) {
    if (at_end() || !is_name_start(peek())) fail("expected " + what);
    const std::size_t start = pos_;
    while (!at_end() && is_name_char(peek())) next();
    return std::string(doc_.substr(start, pos_ - start));
  }

  /// A reference after its '&' was seen (pos_ at the '&').
  void reference() {
    next();  // '&'
    if (peek() == '#') {
      next();
      const bool hexadecimal = peek() == 'x';
      if (hexadecimal) next();
      std::uint64_t v = 0;
      std::size_t digits = 0;
      while (!at_end() && peek() != ';') {
        const char c = peek();
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        if (hexadecimal && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        if (hexadecimal && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d < 0) fail("invalid character reference");
        v = v * (hexadecimal ? 16u : 10u) + static_cast<std::uint64_t>(d);
        if (v > 0x10FFFF) v = 0x110000;  // stays out of range without overflowing
        ++digits;
        next();
      }
      if (digits == 0 || at_end()) fail("invalid character reference");
      next();  // ';'
      if (!is_char(static_cast<std::uint32_t>(v))) fail("character reference to a character not allowed in XML");
      return;
    }
    if (at_end() || !is_name_start(peek())) fail("'&' not starting a reference (write &amp;)");
    const std::string n = name("entity name");
    if (peek() != ';') fail("entity reference &" + n + " without ';'");
    next();
    if (n != "lt" && n != "gt" && n != "amp" && n != "apos" && n != "quot") fail("undefined entity &" + n + ";");
  }

  /// A quoted literal (pos_ at the quote); checks characters only.
  std::string literal(const std::string& what) {
    const char q = peek();
    if (q != '"' && q != '\'') fail("expected a quoted " + what);
    next();
    const std::size_t start = pos_;
    while (!at_end() && peek() != q) next();
    if (at_end()) fail("unterminated " + what);
    const std::string value(doc_.substr(start, pos_ - start));
    next();
    return value;
  }

  void xml_declaration() {
    expect("<?xml", "'<?xml'");
    if (!space()) fail("expected white space after '<?xml'");
    if (!looking_at("version")) fail("XML declaration without version");
    expect("version", "version");
    eq();
    const std::string version = literal("version");
    if (version.size() < 3 || version.substr(0, 2) != "1." ||
        version.find_first_not_of("0123456789", 2) != std::string::npos) {
      fail("XML declaration version \"" + version + "\" is not 1.x");
    }
    bool had_space = space();
    if (looking_at("encoding")) {
      if (!had_space) fail("expected white space before encoding");
      expect("encoding", "encoding");
      eq();
      const std::string enc = literal("encoding");
      if (enc.empty() || !((enc[0] >= 'A' && enc[0] <= 'Z') || (enc[0] >= 'a' && enc[0] <= 'z')) ||
          enc.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
              std::string::npos) {
        fail("invalid encoding name \"" + enc + "\"");
      }
      had_space = space();
    }
    if (looking_at("standalone")) {
      if (!had_space) fail("expected white space before standalone");
      expect("standalone", "standalone");
      eq();
      const std::string sd = literal("standalone");
      if (sd != "yes" && sd != "no") fail("standalone must be \"yes\" or \"no\", got \"" + sd + "\"");
      space();
    }
    if (!looking_at("?>")) fail("malformed XML declaration");
    expect("?>", "'?>'");
  }

  void eq() {
    space();
    if (peek() != '=') fail("expected '='");
    next();
    space();
  }

  void comment() {
    const std::size_t start_line = line_;
    expect("<!--", "'<!--'");
    for (;;) {
      if (at_end()) fail("unterminated comment", start_line);
      if (looking_at("--")) {
        if (looking_at("-->")) break;
        fail("'--' inside a comment");
      }
      next();
    }
    expect("-->", "'-->'");
  }

  void processing_instruction() {
    const std::size_t start_line = line_;
    expect("<?", "'<?'");
    const std::string target = name("a processing instruction target");
    if (target.size() == 3 && (target[0] == 'x' || target[0] == 'X') && (target[1] == 'm' || target[1] == 'M') &&
        (target[2] == 'l' || target[2] == 'L')) {
      fail("processing instruction target \"" + target + "\" is reserved (an XML declaration not at the start?)");
    }
    if (!looking_at("?>") && !space()) fail("expected white space after the processing instruction target");
    while (!looking_at("?>")) {
      if (at_end()) fail("unterminated processing instruction", start_line);
      next();
    }
    expect("?>", "'?>'");
  }

  void cdata() {
    const std::size_t start_line = line_;
    expect("<![CDATA[", "'<![CDATA['");
    while (!looking_at("]]>")) {
      if (at_end()) fail("unterminated CDATA section", start_line);
      next();
    }
    expect("]]>", "']]>'");
  }

  void doctype() {
    expect("<!DOCTYPE", "'<!DOCTYPE'");
    if (!space()) fail("expected white space after '<!DOCTYPE'");
    name("the DOCTYPE name");
    space();
    if (looking_at("SYSTEM")) {
      expect("SYSTEM", "SYSTEM");
      if (!space()) fail("expected white space after SYSTEM");
      literal("system literal");
    } else if (looking_at("PUBLIC")) {
      expect("PUBLIC", "PUBLIC");
      if (!space()) fail("expected white space after PUBLIC");
      const std::string pub = literal("public id");
      if (pub.find_first_not_of(
              " \r\nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-'()+,./:=?;!*#@$_%") !=
          std::string::npos) {
        fail("invalid character in the public id");
      }
      if (!space()) fail("expected white space before the system literal");
      literal("system literal");
    }
    space();
    if (peek() == '[') fail("DOCTYPE internal subset is not supported");
    if (peek() != '>') fail("malformed DOCTYPE");
    next();
  }

  /// Comments, PIs and white space; with `prolog`, also one DOCTYPE before the root.
  void misc(bool prolog) {
    bool seen_doctype = false;
    for (;;) {
      space();
      if (looking_at("<!--")) {
        comment();
      } else if (looking_at("<?")) {
        processing_instruction();
      } else if (looking_at("<!DOCTYPE")) {
        if (!prolog) fail("DOCTYPE after the root element");
        if (seen_doctype) fail("second DOCTYPE");
        doctype();
        seen_doctype = true;
      } else {
        return;
      }
    }
  }

  void document() {
    if (looking_at("\xEF\xBB\xBF")) pos_ += 3;  // UTF-8 byte-order mark
    if (at_end()) fail("empty document");
    if (looking_at("<?xml") && (pos_ + 5 >= doc_.size() || is_space(doc_[pos_ + 5]))) xml_declaration();
    misc(true);
    if (at_end()) fail("no root element");
    if (peek() != '<') fail("text outside the root element");
    if (looking_at("<![CDATA[")) fail("CDATA section outside the root element");
    if (looking_at("</")) fail("end tag before any start tag");
    if (looking_at("<!")) fail("unknown markup declaration");
    element();
    misc(false);
    if (!at_end()) {
      if (peek() == '<' && is_name_start(peek(1))) fail("more than one root element");
      if (peek() == '<') fail("markup after the root element");
      fail("text after the root element");
    }
  }

  /// The root element and everything inside it, iteratively (no recursion limit).
  void element() {
    struct open_element {
      std::string name;
      std::size_t line;
    };
    std::vector<open_element> stack;
    for (;;) {
      // pos_ at '<' of a start tag.
      const std::size_t tag_line = line_;
      next();  // '<'
      std::string n = name("an element name");
      ++result_.elements;
      if (result_.root.empty()) result_.root = n;
      std::set<std::string> attributes;
      bool empty_element = false;
      for (;;) {
        const bool had_space = space();
        if (at_end()) fail("unterminated start tag <" + n + ">", tag_line);
        if (looking_at("/>")) {
          next();
          next();
          empty_element = true;
          break;
        }
        if (peek() == '>') {
          next();
          break;
        }
        if (!had_space) fail("expected white space before an attribute in <" + n + ">");
        const std::string attr = name("an attribute name or '>' in <" + n + ">");
        if (!attributes.insert(attr).second) fail("duplicate attribute " + attr + " in <" + n + ">");
        eq();
        attribute_value(attr);
      }
      if (!empty_element) stack.push_back({std::move(n), tag_line});

      // Content until the next start tag, or until the stack empties.
      for (;;) {
        if (stack.empty()) return;
        if (at_end()) {
          fail("end of document inside <" + stack.back().name + "> opened on line " + std::to_string(stack.back().line),
               stack.back().line);
        }
        const char c = peek();
        if (c == '<') {
          if (looking_at("</")) {
            next();
            next();
            const std::string closing = name("an element name after '</'");
            space();
            if (peek() != '>') fail("malformed end tag </" + closing + ">");
            next();
            if (closing != stack.back().name) {
              fail("end tag </" + closing + "> does not match <" + stack.back().name + "> opened on line " +
                   std::to_string(stack.back().line));
            }
            stack.pop_back();
          } else if (looking_at("<!--")) {
            comment();
          } else if (looking_at("<![CDATA[")) {
            cdata();
          } else if (looking_at("<?")) {
            processing_instruction();
          } else if (looking_at("<!")) {
            fail("unexpected markup declaration inside an element");
          } else if (is_name_start(peek(1))) {
            break;  // a child start tag
          } else {
            fail("'<' not starting a tag (write &lt;)");
          }
        } else if (c == '&') {
          reference();
        } else if (looking_at("]]>")) {
          fail("']]>' in character data");
        } else {
          next();
        }
      }
    }
  }

  void attribute_value(const std::string& attr) {
    const char q = peek();
    if (q != '"' && q != '\'') fail("attribute " + attr + " value is not quoted");
    const std::size_t start_line = line_;
    next();
    for (;;) {
      if (at_end()) fail("unterminated value of attribute " + attr, start_line);
      const char c = peek();
      if (c == q) break;
      if (c == '<') fail("'<' in the value of attribute " + attr);
      if (c == '&') {
        reference();
      } else {
        next();
      }
    }
    next();
  }
};

}  // namespace xml_detail

/// Checks that `doc` is a well-formed XML 1.0 document (see the top of this file for what
/// is and is not checked).
inline xml_result check_xml(std::string_view doc) { return xml_detail::checker(doc).run(); }

}  // namespace moepolicy::test
