// A small SVG writer and an XML well-formedness check, with no dependency beyond the standard
// library.
//
// SvgWriter appends elements to a string; every attribute value and text it writes is escaped
// (& < > " '), so the output is well-formed XML whatever the names it draws. Coordinates are
// written with at most one decimal. check_xml is the reader's side: it accepts the subset of XML
// the writer emits (elements, attributes, text, comments, a declaration) and names the first
// problem.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sc::picture {

// `text` with & < > " ' replaced by their entities.
std::string xml_escape(std::string_view text);
// `value` with at most one decimal and no trailing zeros ("12.5", "3").
std::string svg_number(double value);
// Width in pixels a sans-serif `text` of `font_px` takes at most (a conservative estimate).
double text_width(std::string_view text, double font_px);

// An attribute list: names are written as given, values escaped.
using Attrs = std::vector<std::pair<std::string, std::string>>;

// Builds one SVG document.
class SvgWriter {
 public:
  SvgWriter() = default;
  // Opens an element (closed by close()).
  void open(const std::string& tag, const Attrs& attrs = {});
  // Closes the innermost open element.
  void close();
  // An element without children.
  void empty(const std::string& tag, const Attrs& attrs);
  // An element holding only `text` (escaped).
  void text_element(const std::string& tag, const Attrs& attrs, std::string_view text);
  // <rect>, with an optional <title> tooltip.
  void rect(double left, double top, double width, double height, const Attrs& extra,
            const std::string& title = "");
  // <line>.
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width);
  // <text> at (left, top) of `font_px` pixels; `anchor` start, middle or end.
  void text(double left, double top, std::string_view text, double font_px, const Attrs& extra = {},
            const std::string& anchor = "start");
  // The finished document of `width` x `height` pixels (closes what is still open).
  std::string finish(double width, double height);

 private:
  std::string out_;
  std::vector<std::string> open_;
};

// Empty when `xml` is well-formed (balanced and properly nested tags, quoted attributes, known
// entities, one root element), else the first problem and its byte offset.
std::optional<std::string> check_xml(std::string_view xml);

}  // namespace sc::picture
