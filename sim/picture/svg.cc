#include "sim/picture/svg.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace sc::picture {

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters other than tab and newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n') {
          out += ' ';
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string svg_number(double value) {
  if (!std::isfinite(value)) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", value);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

double text_width(std::string_view text, double font_px) {
  double w = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if ((ch & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    if (ch >= 0x80) {
      w += 0.75;  // a symbol drawn from a wider font
    } else if (std::isupper(ch) || ch == 'm' || ch == 'w' || ch == '@') {
      w += 0.72;
    } else if (ch == 'i' || ch == 'l' || ch == 'j' || ch == '.' || ch == ',' || ch == '|' ||
               ch == '\'' || ch == ' ' || ch == ':' || ch == '(' || ch == ')') {
      w += 0.34;
    } else {
      w += 0.58;
    }
  }
  return w * font_px * 1.08;  // a margin for fonts wider than the estimate
}


namespace {
std::string attrs_text(const Attrs& attrs) {
  std::string s;
  for (const auto& [name, value] : attrs) s += " " + name + "=\"" + xml_escape(value) + "\"";
  return s;
}
}  // namespace

void SvgWriter::open(const std::string& tag, const Attrs& attrs) {
  out_ += "<" + tag + attrs_text(attrs) + ">\n";
  open_.push_back(tag);
}

void SvgWriter::close() {
  if (open_.empty()) return;
  out_ += "</" + open_.back() + ">\n";
  open_.pop_back();
}

void SvgWriter::empty(const std::string& tag, const Attrs& attrs) {
  out_ += "<" + tag + attrs_text(attrs) + "/>\n";
}

void SvgWriter::text_element(const std::string& tag, const Attrs& attrs, std::string_view text) {
  out_ += "<" + tag + attrs_text(attrs) + ">" + xml_escape(text) + "</" + tag + ">\n";
}

void SvgWriter::rect(double left, double top, double width, double height, const Attrs& extra,
                     const std::string& title) {
  Attrs a{{"x", svg_number(left)}, {"y", svg_number(top)}, {"width", svg_number(width)},
          {"height", svg_number(height)}};
  a.insert(a.end(), extra.begin(), extra.end());
  if (title.empty()) {
    empty("rect", a);
  } else {
    out_ += "<rect" + attrs_text(a) + "><title>" + xml_escape(title) + "</title></rect>\n";
  }
}

void SvgWriter::line(double x1, double y1, double x2, double y2, const std::string& stroke,
                     double width) {
  empty("line", {{"x1", svg_number(x1)},
                 {"y1", svg_number(y1)},
                 {"x2", svg_number(x2)},
                 {"y2", svg_number(y2)},
                 {"stroke", stroke},
                 {"stroke-width", svg_number(width)}});
}

void SvgWriter::text(double left, double top, std::string_view text, double font_px,
                     const Attrs& extra, const std::string& anchor) {
  Attrs a{{"x", svg_number(left)}, {"y", svg_number(top)}, {"font-size", svg_number(font_px)}};
  if (anchor != "start") a.emplace_back("text-anchor", anchor);
  a.insert(a.end(), extra.begin(), extra.end());
  text_element("text", a, text);
}

std::string SvgWriter::finish(double width, double height) {
  while (!open_.empty()) close();
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         svg_number(width) + "\" height=\"" + svg_number(height) + "\" viewBox=\"0 0 " +
         svg_number(width) + " " + svg_number(height) +
         "\" font-family=\"DejaVu Sans, Verdana, sans-serif\">\n" + out_ + "</svg>\n";
}

namespace {

bool name_char(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == ':' ||
         ch == '.';
}

// " at offset N", the end of most of check_xml's messages.
std::string at_offset(size_t offset) { return " at offset " + std::to_string(offset); }

// Checks the entity references of `text` (text or an attribute value) that starts at offset
// `base`.
std::optional<std::string> check_entities(std::string_view text, size_t base) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<') return "'<' inside text or a value at offset " + std::to_string(base + i);
    if (text[i] != '&') continue;
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos) {
      return "unterminated entity at offset " + std::to_string(base + i);
    }
    const std::string_view ent = text.substr(i + 1, semi - i - 1);
    const bool known = ent == "amp" || ent == "lt" || ent == "gt" || ent == "quot" ||
                       ent == "apos" || (ent.size() > 1 && ent[0] == '#');
    if (!known) return "unknown entity &" + std::string(ent) + "; at offset " +
                       std::to_string(base + i);
    i = semi;
  }
  return std::nullopt;
}

// Checks the text from `pos` to the next '<' (only blanks outside the root element, while no
// element is open in `stack`); moves `pos` past it.
std::optional<std::string> check_text(std::string_view xml, size_t& pos,
                                      const std::vector<std::string>& stack) {
  const size_t next = xml.find('<', pos);
  const std::string_view text = xml.substr(pos, next == std::string_view::npos ? xml.size() - pos
                                                                                : next - pos);
  if (stack.empty() && text.find_first_not_of(" \t\r\n") != std::string_view::npos) {
    return "text outside the root element" + at_offset(pos);
  }
  if (auto why = check_entities(text, pos)) return why;
  pos += text.size();
  return std::nullopt;
}

// Skips the comment, <?...?> declaration or <!...> declaration that starts at `pos`, if one
// does: sets `skipped` and moves `pos` past it; an error when it is unterminated.
std::optional<std::string> skip_markup(std::string_view xml, size_t& pos, bool& skipped) {
  skipped = true;
  if (xml.substr(pos, 4) == "<!--") {
    const size_t end = xml.find("-->", pos + 4);
    if (end == std::string_view::npos) return "unterminated comment" + at_offset(pos);
    pos = end + 3;
    return std::nullopt;
  }
  if (xml.substr(pos, 2) == "<?") {
    const size_t end = xml.find("?>", pos + 2);
    if (end == std::string_view::npos) return "unterminated declaration" + at_offset(pos);
    pos = end + 2;
    return std::nullopt;
  }
  if (xml.substr(pos, 2) == "<!") {  // <!DOCTYPE ...>
    const size_t end = xml.find('>', pos);
    if (end == std::string_view::npos) return "unterminated declaration" + at_offset(pos);
    pos = end + 1;
    return std::nullopt;
  }
  skipped = false;
  return std::nullopt;
}

// Checks the rest of the closing tag </name that starts at `start`, from `pos` (after the name)
// to its '>', against the innermost open element in `stack`, and closes that; leaves `pos` at
// the '>'.
std::optional<std::string> close_tag(std::string_view xml, size_t start, size_t& pos,
                                     const std::string& name, std::vector<std::string>& stack) {
  while (pos < xml.size() && std::isspace(static_cast<unsigned char>(xml[pos]))) ++pos;
  if (pos >= xml.size() || xml[pos] != '>') {
    return "malformed closing tag </" + name + at_offset(start);
  }
  if (stack.empty() || stack.back() != name) {
    return "closing tag </" + name + "> does not match " +
           (stack.empty() ? std::string("any open element") : "<" + stack.back() + ">") +
           at_offset(start);
  }
  stack.pop_back();
  return std::nullopt;
}

// Checks one attribute name="value" of element <tag> at `pos`, its name not among `seen` (which
// gets it); moves `pos` past the value.
std::optional<std::string> check_attribute(std::string_view xml, size_t& pos,
                                           const std::string& tag, std::vector<std::string>& seen) {
  const size_t name_start = pos;
  while (pos < xml.size() && name_char(xml[pos])) ++pos;
  const std::string attr(xml.substr(name_start, pos - name_start));
  if (attr.empty()) return "bad character in tag <" + tag + at_offset(pos);
  for (const auto& s : seen) {
    if (s == attr) {
      return "attribute " + attr + " repeated in <" + tag + ">" + at_offset(name_start);
    }
  }
  seen.push_back(attr);
  if (pos >= xml.size() || xml[pos] != '=') {
    return "attribute " + attr + " without a value" + at_offset(pos);
  }
  ++pos;
  if (pos >= xml.size() || (xml[pos] != '"' && xml[pos] != '\'')) {
    return "unquoted value of " + attr + at_offset(pos);
  }
  const char quote = xml[pos];
  const size_t end = xml.find(quote, pos + 1);
  if (end == std::string_view::npos) return "unterminated value of " + attr + at_offset(pos);
  if (auto why = check_entities(xml.substr(pos + 1, end - pos - 1), pos + 1)) return why;
  pos = end + 1;
  return std::nullopt;
}

// Checks the attributes of the start tag <tag that starts at `start`, from `pos` (after the
// name) to the tag's end; leaves `pos` at its '>' and sets `self_closing` when it ends in "/>".
std::optional<std::string> check_attributes(std::string_view xml, size_t start, size_t& pos,
                                            const std::string& tag, bool& self_closing) {
  std::vector<std::string> seen;
  self_closing = false;
  for (;;) {
    while (pos < xml.size() && std::isspace(static_cast<unsigned char>(xml[pos]))) ++pos;
    if (pos >= xml.size()) return "unterminated tag <" + tag + at_offset(start);
    if (xml[pos] == '>') return std::nullopt;
    if (xml.substr(pos, 2) == "/>") {
      self_closing = true;
      ++pos;
      return std::nullopt;
    }
    if (auto why = check_attribute(xml, pos, tag, seen)) return why;
  }
}

}  // namespace

std::optional<std::string> check_xml(std::string_view xml) {
  std::vector<std::string> stack;
  int roots = 0;
  size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      if (auto why = check_text(xml, i, stack)) return why;
      continue;
    }
    bool skipped = false;
    if (auto why = skip_markup(xml, i, skipped)) return why;
    if (skipped) continue;
    const bool closing = xml.substr(i, 2) == "</";
    size_t k = i + (closing ? 2 : 1);
    const size_t name_start = k;
    while (k < xml.size() && name_char(xml[k])) ++k;
    const std::string name(xml.substr(name_start, k - name_start));
    if (name.empty()) return "a tag without a name" + at_offset(i);
    if (closing) {
      if (auto why = close_tag(xml, i, k, name, stack)) return why;
      i = k + 1;
      continue;
    }
    bool self_closing = false;
    if (auto why = check_attributes(xml, i, k, name, self_closing)) return why;
    if (stack.empty()) {
      if (++roots > 1) return "a second root element <" + name + ">" + at_offset(i);
    }
    if (!self_closing) stack.push_back(name);
    i = k + 1;
  }
  if (!stack.empty()) return "element <" + stack.back() + "> is never closed";
  if (roots == 0) return std::string("no root element");
  return std::nullopt;
}

}  // namespace sc::picture
