#include "sim/picture/svg.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace sc::sim {

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

std::string svg_number(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", v);
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

void SvgWriter::rect(double x, double y, double w, double h, const Attrs& extra,
                     const std::string& title) {
  Attrs a{{"x", svg_number(x)}, {"y", svg_number(y)}, {"width", svg_number(w)},
          {"height", svg_number(h)}};
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

void SvgWriter::text(double x, double y, std::string_view s, double font_px, const Attrs& extra,
                     const std::string& anchor) {
  Attrs a{{"x", svg_number(x)}, {"y", svg_number(y)}, {"font-size", svg_number(font_px)}};
  if (anchor != "start") a.emplace_back("text-anchor", anchor);
  a.insert(a.end(), extra.begin(), extra.end());
  text_element("text", a, s);
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

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' ||
         c == '.';
}

// Checks the entity references of `s` (text or an attribute value).
std::optional<std::string> check_entities(std::string_view s, size_t base) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') return "'<' inside text or a value at offset " + std::to_string(base + i);
    if (s[i] != '&') continue;
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      return "unterminated entity at offset " + std::to_string(base + i);
    }
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    const bool known = ent == "amp" || ent == "lt" || ent == "gt" || ent == "quot" ||
                       ent == "apos" || (ent.size() > 1 && ent[0] == '#');
    if (!known) return "unknown entity &" + std::string(ent) + "; at offset " +
                       std::to_string(base + i);
    i = semi;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> check_xml(std::string_view xml) {
  std::vector<std::string> stack;
  int roots = 0;
  size_t i = 0;
  const auto at = [](size_t k) { return " at offset " + std::to_string(k); };
  while (i < xml.size()) {
    if (xml[i] != '<') {
      const size_t next = xml.find('<', i);
      const std::string_view text = xml.substr(i, next == std::string_view::npos ? xml.size() - i
                                                                                  : next - i);
      if (stack.empty() && text.find_first_not_of(" \t\r\n") != std::string_view::npos) {
        return "text outside the root element" + at(i);
      }
      if (auto why = check_entities(text, i)) return why;
      i += text.size();
      continue;
    }
    if (xml.substr(i, 4) == "<!--") {
      const size_t end = xml.find("-->", i + 4);
      if (end == std::string_view::npos) return "unterminated comment" + at(i);
      i = end + 3;
      continue;
    }
    if (xml.substr(i, 2) == "<?") {
      const size_t end = xml.find("?>", i + 2);
      if (end == std::string_view::npos) return "unterminated declaration" + at(i);
      i = end + 2;
      continue;
    }
    if (xml.substr(i, 2) == "<!") {  // <!DOCTYPE ...>
      const size_t end = xml.find('>', i);
      if (end == std::string_view::npos) return "unterminated declaration" + at(i);
      i = end + 1;
      continue;
    }
    const bool closing = xml.substr(i, 2) == "</";
    size_t k = i + (closing ? 2 : 1);
    const size_t name_start = k;
    while (k < xml.size() && name_char(xml[k])) ++k;
    const std::string name(xml.substr(name_start, k - name_start));
    if (name.empty()) return "a tag without a name" + at(i);
    if (closing) {
      while (k < xml.size() && std::isspace(static_cast<unsigned char>(xml[k]))) ++k;
      if (k >= xml.size() || xml[k] != '>') return "malformed closing tag </" + name + at(i);
      if (stack.empty() || stack.back() != name) {
        return "closing tag </" + name + "> does not match " +
               (stack.empty() ? std::string("any open element") : "<" + stack.back() + ">") +
               at(i);
      }
      stack.pop_back();
      i = k + 1;
      continue;
    }
    // Attributes.
    std::vector<std::string> seen;
    bool self_closing = false;
    for (;;) {
      while (k < xml.size() && std::isspace(static_cast<unsigned char>(xml[k]))) ++k;
      if (k >= xml.size()) return "unterminated tag <" + name + at(i);
      if (xml[k] == '>') break;
      if (xml.substr(k, 2) == "/>") {
        self_closing = true;
        ++k;
        break;
      }
      const size_t an = k;
      while (k < xml.size() && name_char(xml[k])) ++k;
      const std::string attr(xml.substr(an, k - an));
      if (attr.empty()) return "bad character in tag <" + name + at(k);
      for (const auto& s : seen) {
        if (s == attr) return "attribute " + attr + " repeated in <" + name + ">" + at(an);
      }
      seen.push_back(attr);
      if (k >= xml.size() || xml[k] != '=') return "attribute " + attr + " without a value" + at(k);
      ++k;
      if (k >= xml.size() || (xml[k] != '"' && xml[k] != '\'')) {
        return "unquoted value of " + attr + at(k);
      }
      const char q = xml[k];
      const size_t end = xml.find(q, k + 1);
      if (end == std::string_view::npos) return "unterminated value of " + attr + at(k);
      if (auto why = check_entities(xml.substr(k + 1, end - k - 1), k + 1)) return why;
      k = end + 1;
    }
    if (stack.empty()) {
      if (++roots > 1) return "a second root element <" + name + ">" + at(i);
    }
    if (!self_closing) stack.push_back(name);
    i = k + 1;
  }
  if (!stack.empty()) return "element <" + stack.back() + "> is never closed";
  if (roots == 0) return std::string("no root element");
  return std::nullopt;
}

}  // namespace sc::sim
