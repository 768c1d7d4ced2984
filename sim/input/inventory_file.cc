#include "sim/input/inventory_file.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace sc::input {

namespace {

using nlohmann::json;

// A schema error: the JSON path of the offending value and what is wrong with it.
struct FileError {
  std::string message;
};

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw FileError{path.empty() ? why : path + ": " + why};
}

std::string in_quotes(const std::string& text) { return "\"" + text + "\""; }

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
  return s;
}

// Fails on the first key of `object` that is not in `known`.
void check_keys(const json& object, const std::string& path, const std::vector<std::string>& known,
                const std::string& what) {
  for (const auto& [key, value] : object.items()) {
    (void)value;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      fail(path,
           "unknown key " + in_quotes(key) + " (" + what + " takes: " + join_keys(known) + ")");
    }
  }
}

std::string member(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string element(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

const json& expect(const json& value, const std::string& path, json::value_t type,
                   const char* what) {
  const bool ok =
      type == json::value_t::number_integer ? value.is_number_integer() : value.type() == type;
  if (!ok) fail(path, std::string("expected ") + what + ", got " + value.type_name());
  return value;
}

int64_t get_int(const json& value, const std::string& path, int64_t lo, int64_t hi) {
  expect(value, path, json::value_t::number_integer, "an integer");
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    fail(path, "must be at most " + std::to_string(hi));
  }
  const int64_t n = value.is_number_unsigned() ? static_cast<int64_t>(value.get<uint64_t>())
                                               : value.get<int64_t>();
  if (n < lo) fail(path, std::to_string(n) + " must be at least " + std::to_string(lo));
  if (n > hi) fail(path, "must be at most " + std::to_string(hi));
  return n;
}

bool get_bool(const json& object, const std::string& path, const char* key, bool fallback) {
  if (!object.contains(key)) return fallback;
  return expect(object.at(key), member(path, key), json::value_t::boolean, "true or false")
      .get<bool>();
}

const std::string& get_string(const json& value, const std::string& path) {
  return expect(value, path, json::value_t::string, "a string").get_ref<const std::string&>();
}

bool is_identifier(const std::string& text) {
  if (text.empty() || !(std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_')) {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

model::DType get_dtype(const json& value, const std::string& path) {
  const std::string& name = get_string(value, path);
  const auto d = model::parse_dtype(name);
  if (!d || *d == model::DType::kFloat64) {
    fail(path, "unknown dtype " + in_quotes(name) + " (known: bf16, fp16, fp32)");
  }
  return *d;
}

// Where expansion stands: the placement and expert it gives, and the placeholder values.
struct Context {
  std::optional<int> place;    // layer index, or -1 pre, -2 post, -3 MTP
  bool in_layer_loop = false;  // inside for_each_layer: the loop places
  int expert = -1;
  std::map<std::string, std::string> vars;  // placeholder -> value
  std::vector<std::string> blocks;          // blocks being expanded (no recursion)
};

// Replaces every {name} of `text` by its value in `vars`.
std::string substitute(const std::string& text, const std::map<std::string, std::string>& vars,
                       const std::string& path) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '}') fail(path, "'}' without '{' in " + in_quotes(text));
    if (text[i] != '{') {
      out += text[i];
      continue;
    }
    const size_t close = text.find('}', i);
    if (close == std::string::npos) fail(path, "'{' without '}' in " + in_quotes(text));
    const std::string name = text.substr(i + 1, close - i - 1);
    const auto it = vars.find(name);
    if (it == vars.end()) {
      std::vector<std::string> known;
      for (const auto& [k, v] : vars) known.push_back("{" + k + "}");
      fail(path, "unknown placeholder {" + name + "} in " + in_quotes(text) +
                     " (known here: " + (known.empty() ? "none" : join_keys(known)) + ")");
    }
    out += it->second;
    i = close;
  }
  return out;
}

const std::vector<std::string> kTopKeys{"name",        "description", "num_layers",
                                        "num_experts", "dtype",       "scalable",
                                        "dims",        "blocks",      "params",
                                        "pipeline_layout"};
const std::vector<std::string> kParamKeys{"name",         "shape",        "dtype",
                                          "place",        "keep_in_fp32", "shared_embedding",
                                          "weight_decay", "expert",       "tp_split"};

class Expander {
 public:
  Expander(const json& root, int64_t scale) : root_(root), scale_(scale) {}

  ModelInventory run() {
    expect(root_, "", json::value_t::object, "a JSON object at the top");
    check_keys(root_, "", kTopKeys, "a model file");
    header();
    dims();
    if (root_.contains("blocks")) {
      const json& b =
          expect(root_.at("blocks"), "blocks", json::value_t::object, "an object of named lists");
      for (const auto& [name, list] : b.items()) {
        expect(list, member("blocks", name), json::value_t::array, "an array");
      }
    }
    if (!root_.contains("params")) fail("", "missing key \"params\"");
    const json& params = expect(root_.at("params"), "params", json::value_t::array, "an array");
    if (params.empty()) fail("params", "no parameters (the list is empty)");
    entries(params, "params", Context{});
    if (out_.params.empty()) fail("params", "expands to no parameters");
    return std::move(out_);
  }

 private:
  void header() {
    if (!root_.contains("name")) fail("", "missing key \"name\"");
    out_.name = get_string(root_.at("name"), "name");
    if (out_.name.empty()) fail("name", "must not be empty");
    if (root_.contains("description")) get_string(root_.at("description"), "description");
    if (!root_.contains("num_layers")) fail("", "missing key \"num_layers\"");
    out_.num_layers =
        static_cast<int>(get_int(root_.at("num_layers"), "num_layers", 1, kMaxFileLayers));
    if (root_.contains("num_experts")) {
      out_.num_experts =
          static_cast<int>(get_int(root_.at("num_experts"), "num_experts", 0, kMaxFileExperts));
    }
    if (root_.contains("dtype")) dtype_ = get_dtype(root_.at("dtype"), "dtype");
    scalable_ = get_bool(root_, "", "scalable", true);
    if (root_.contains("pipeline_layout")) {
      out_.pipeline_layout = get_string(root_.at("pipeline_layout"), "pipeline_layout");
      if (out_.pipeline_layout.empty()) fail("pipeline_layout", "must not be empty");
    }
  }

  void dims() {
    if (!root_.contains("dims")) return;
    const json& d = expect(root_.at("dims"), "dims", json::value_t::object, "an object");
    for (const auto& [name, value] : d.items()) {
      const std::string path = member("dims", name);
      if (!is_identifier(name)) fail(path, "a dimension name is letters, digits and '_'");
      dims_[name] = get_int(value, path, 1, kMaxFileDim);
    }
  }

  // `V / scale`, never below 1, unless the dimension is fixed or the model is not scalable.
  int64_t scaled(int64_t value, bool fixed) const {
    return fixed || !scalable_ ? value : std::max<int64_t>(1, value / scale_);
  }

  // A dimension: an integer, or a string "[=][K*]X" with X an integer or a name from "dims".
  int64_t dimension(const json& value, const std::string& path) const {
    if (!value.is_string()) return scaled(get_int(value, path, 1, kMaxFileDim), false);
    const std::string& s = value.get_ref<const std::string&>();
    const bool fixed = !s.empty() && s[0] == '=';
    std::string rest = s.substr(fixed ? 1 : 0);
    int64_t k = 1;
    const size_t star = rest.find('*');
    const auto bad = [&] {
      fail(path, "bad dimension " + in_quotes(s) +
                     " (expected an integer, a name from \"dims\", \"K*X\" or \"=X\")");
    };
    auto number = [&](const std::string& t, int64_t hi) {
      const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
      if (t.empty() || t.size() > 15 || !std::all_of(t.begin(), t.end(), digit)) bad();
      const int64_t n = std::stoll(t);
      if (n < 1) fail(path, "dimension " + in_quotes(s) + " must be at least 1");
      if (n > hi) fail(path, "dimension " + in_quotes(s) + " is too large");
      return n;
    };
    if (star != std::string::npos) {
      k = number(rest.substr(0, star), 1 << 20);
      rest = rest.substr(star + 1);
    }
    int64_t x = 0;
    if (is_identifier(rest)) {
      const auto it = dims_.find(rest);
      if (it == dims_.end())
        fail(path, "unknown dimension name " + in_quotes(rest) + " (see \"dims\")");
      x = it->second;
    } else {
      x = number(rest, kMaxFileDim);
    }
    const int64_t d = k * scaled(x, fixed);
    if (d > kMaxFileDim) fail(path, "dimension " + in_quotes(s) + " is too large");
    return d;
  }

  void entries(const json& list, const std::string& path, const Context& ctx) {
    expect(list, path, json::value_t::array, "an array");
    for (size_t i = 0; i < list.size(); ++i) entry(list[i], element(path, i), ctx);
  }

  // Counts one step of expansion (an entry, or a loop turn over a possibly empty list), so that
  // expansion ends even when it makes no parameters.
  void tick(const std::string& path) {
    if (++visited_ > 10 * kMaxFileParams) fail(path, "the file expands too far");
  }

  void entry(const json& item, const std::string& path, const Context& ctx) {
    tick(path);
    expect(item, path, json::value_t::object, "an object");
    if (item.contains("name")) return param(item, path, ctx);
    if (item.contains("for_each_layer")) return layer_loop(item, path, ctx);
    if (item.contains("for_each_expert")) return expert_loop(item, path, ctx);
    if (item.contains("use")) return use(item, path, ctx);
    fail(path,
         "expected a parameter (with \"name\") or one of for_each_layer, for_each_expert, "
         "use");
  }

  // Applies the entry's "place" to `ctx`.
  void place(const json& item, const std::string& path, Context& ctx) const {
    if (!item.contains("place")) return;
    const std::string p = member(path, "place");
    if (ctx.in_layer_loop) fail(p, "not allowed inside for_each_layer (the loop places)");
    const json& v = item.at("place");
    const std::string layers = "below " + std::to_string(out_.num_layers);
    if (v.is_number_integer()) {
      ctx.place = static_cast<int>(get_int(v, p, 0, out_.num_layers - 1));
      return;
    }
    const std::string what = "\"pre\", \"post\", \"mtp\" or a layer index " + layers;
    if (!v.is_string()) fail(p, "expected " + what + ", got " + v.type_name());
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "pre") {
      ctx.place = -1;
    } else if (s == "post") {
      ctx.place = -2;
    } else if (s == "mtp") {
      ctx.place = -3;
    } else {
      fail(p, "expected " + what + ", got " + in_quotes(s));
    }
  }

  void need_experts(const std::string& path) const {
    if (out_.num_experts == 0) {
      fail(path, "expert parameters need \"num_experts\" (the model has no experts)");
    }
  }

  void layer_loop(const json& item, const std::string& path, const Context& ctx) {
    check_keys(item, path, {"for_each_layer"}, "for_each_layer");
    const std::string p = member(path, "for_each_layer");
    if (ctx.in_layer_loop) fail(p, "for_each_layer inside for_each_layer");
    if (ctx.place) fail(p, "for_each_layer under a \"place\"");
    for (int l = 0; l < out_.num_layers; ++l) {
      tick(p);
      Context inner = ctx;
      inner.in_layer_loop = true;
      inner.place = l;
      inner.vars["layer"] = std::to_string(l);
      entries(item.at("for_each_layer"), p, inner);
    }
  }

  void expert_loop(const json& item, const std::string& path, const Context& ctx) {
    check_keys(item, path, {"for_each_expert", "place"}, "for_each_expert");
    const std::string p = member(path, "for_each_expert");
    need_experts(p);
    if (ctx.expert >= 0) fail(p, "for_each_expert inside for_each_expert");
    Context base = ctx;
    place(item, path, base);
    for (int x = 0; x < out_.num_experts; ++x) {
      tick(p);
      Context inner = base;
      inner.expert = x;
      inner.vars["expert"] = std::to_string(x);
      entries(item.at("for_each_expert"), p, inner);
    }
  }

  void use(const json& item, const std::string& path, const Context& ctx) {
    check_keys(item, path, {"use", "with", "place"}, "use");
    const std::string& name = get_string(item.at("use"), member(path, "use"));
    const json* blocks = root_.contains("blocks") ? &root_.at("blocks") : nullptr;
    if (!blocks || !blocks->contains(name)) {
      fail(member(path, "use"), "unknown block " + in_quotes(name) + " (see \"blocks\")");
    }
    if (std::count(ctx.blocks.begin(), ctx.blocks.end(), name)) {
      fail(member(path, "use"), "block " + in_quotes(name) + " uses itself");
    }
    Context inner = ctx;
    place(item, path, inner);
    inner.blocks.push_back(name);
    if (item.contains("with")) {
      const std::string w = member(path, "with");
      for (const auto& [var, value] :
           expect(item.at("with"), w, json::value_t::object, "an object").items()) {
        const std::string vp = member(w, var);
        if (!is_identifier(var) || var == "layer" || var == "expert") {
          fail(vp, "a placeholder name is letters, digits and '_', not layer or expert");
        }
        inner.vars[var] = substitute(get_string(value, vp), ctx.vars, vp);
      }
    }
    entries(blocks->at(name), member("blocks", name), inner);
  }

  void param(const json& item, const std::string& path, const Context& ctx) {
    check_keys(item, path, kParamKeys, "a parameter");
    InventoryParam p;
    const std::string np = member(path, "name");
    p.spec.name = substitute(get_string(item.at("name"), np), ctx.vars, np);
    if (p.spec.name.empty()) fail(np, "must not be empty");
    shape(item, path, p.spec.shape);
    dtype_and_marks(item, path, p.spec);
    std::optional<int> placed = ctx.place;
    if (item.contains("place")) {
      Context here = ctx;
      place(item, path, here);
      placed = here.place;
    }
    if (!placed) {
      fail(path, "no placement for " + in_quotes(p.spec.name) +
                     ": give \"place\" (\"pre\", \"post\", \"mtp\" or a layer index) or put it "
                     "inside for_each_layer");
    }
    p.layer = *placed;
    p.expert = ctx.expert;
    if (item.contains("expert")) {
      const std::string xp = member(path, "expert");
      need_experts(xp);
      if (ctx.expert >= 0) fail(xp, "not allowed inside for_each_expert");
      p.expert = static_cast<int>(get_int(item.at("expert"), xp, 0, out_.num_experts - 1));
    }
    p.spec.is_expert = p.expert >= 0;
    p.tp_split = default_tp_split(p.spec.name);
    if (item.contains("tp_split")) {
      const std::string tp = member(path, "tp_split");
      const std::string& text = get_string(item.at("tp_split"), tp);
      const auto split = parse_tp_split(text);
      if (!split) {
        fail(tp, "unknown split " + in_quotes(text) + " (known: none, column, row, vocab)");
      }
      p.tp_split = *split;
      if (p.tp_split == TpSplit::kRow && p.spec.shape.size() < 2) {
        fail(tp, "a row-parallel parameter needs 2 or more dimensions");
      }
    }
    add(std::move(p), np);
  }

  void shape(const json& item, const std::string& path, std::vector<int64_t>& out) const {
    const std::string sp = member(path, "shape");
    if (!item.contains("shape")) fail(path, "missing key \"shape\"");
    const json& s = expect(item.at("shape"), sp, json::value_t::array, "an array");
    if (s.empty() || s.size() > 8) fail(sp, "expected 1 to 8 dimensions");
    int64_t numel = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      out.push_back(dimension(s[i], element(sp, i)));
      if (numel > kMaxFileNumel / out.back()) fail(sp, "more than 2^48 elements");
      numel *= out.back();
    }
  }

  void dtype_and_marks(const json& item, const std::string& path, model::ParamSpec& spec) const {
    spec.keep_in_fp32 = get_bool(item, path, "keep_in_fp32", false);
    spec.dtype = dtype_;
    if (item.contains("dtype")) {
      spec.dtype = get_dtype(item.at("dtype"), member(path, "dtype"));
      if (spec.keep_in_fp32 && spec.dtype != model::DType::kFloat32) {
        fail(member(path, "dtype"), "keep_in_fp32 needs dtype fp32");
      }
    }
    if (spec.keep_in_fp32) spec.dtype = model::DType::kFloat32;
    spec.shared_embedding = get_bool(item, path, "shared_embedding", false);
    const std::string& n = spec.name;
    const bool bias = n.size() >= 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
    spec.group = get_bool(item, path, "weight_decay", !(spec.shape.size() == 1 || bias)) ? 0 : 1;
  }

  void add(InventoryParam parameter, const std::string& path) {
    const auto [it, fresh] =
        first_.emplace(parameter.spec.name, Origin{path, parameter.layer, parameter.expert});
    if (!fresh) {
      const Origin& o = it->second;
      std::string where = o.path;
      if (o.layer >= 0) where += " (layer " + std::to_string(o.layer) + ")";
      if (o.expert >= 0) where += " (expert " + std::to_string(o.expert) + ")";
      fail(path, "duplicate parameter name " + in_quotes(parameter.spec.name) + " (first from " +
                     where + ")");
    }
    if (static_cast<int64_t>(out_.params.size()) >= kMaxFileParams) {
      fail(path, "more than " + std::to_string(kMaxFileParams) + " parameters");
    }
    out_.params.push_back(std::move(parameter));
  }

  const json& root_;
  int64_t scale_;
  ModelInventory out_;
  model::DType dtype_ = model::DType::kBFloat16;
  bool scalable_ = true;
  std::map<std::string, int64_t> dims_;
  // Where a parameter was made: the path of its entry and its layer and expert.
  struct Origin {
    std::string path;
    int layer, expert;
  };
  std::unordered_map<std::string, Origin> first_;  // by name
  int64_t visited_ = 0;
};

// Thrown from the parser callback: too deep, or a key twice in one object.
struct StructureError {
  std::string message;
};

json parse_json(std::string_view text) {
  std::vector<std::set<std::string>> keys;  // per open object
  auto callback = [&keys](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) throw StructureError{"nested deeper than 64 levels"};
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second) {
      throw StructureError{"duplicate key " + in_quotes(parsed.get<std::string>())};
    }
    return true;
  };
  return json::parse(text.begin(), text.end(), callback);
}

// nlohmann's message without its "[json.exception...] parse error at line L, column C: " prefix.
std::string syntax_message(const json::parse_error& error) {
  std::string what = error.what();
  const size_t at = what.find("syntax error");
  return at == std::string::npos ? what : what.substr(at);
}

}  // namespace

std::pair<int64_t, int64_t> line_column(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  int64_t line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

std::variant<ModelInventory, std::string> parse_inventory_file(std::string_view text,
                                                               int64_t scale) {
  if (scale < 1) return std::string("scale must be at least 1");
  json root;
  try {
    root = parse_json(text);
  } catch (const json::parse_error& e) {
    // `byte` counts the characters read, the offending one included.
    const auto [line, column] = line_column(text, e.byte > 0 ? e.byte - 1 : 0);
    return std::to_string(line) + ":" + std::to_string(column) + ": " + syntax_message(e);
  } catch (const StructureError& e) {
    return e.message;
  } catch (const json::exception& e) {  // a number out of range: no position is known
    const std::string what = e.what();
    return "invalid JSON: " + what.substr(what.find(']') + 2);
  }
  try {
    return Expander(root, scale).run();
  } catch (const FileError& e) {
    return e.message;
  } catch (const json::exception& e) {  // not expected: every access is checked first
    return std::string("malformed model file: ") + e.what();
  }
}

std::variant<ModelInventory, std::string> load_inventory_file(const std::string& path,
                                                              int64_t scale) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path + ": is a directory, not a model file";
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": cannot open the model file";
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return path + ": cannot read the model file";
  auto result = parse_inventory_file(text.str(), scale);
  if (auto* message = std::get_if<std::string>(&result)) {
    const bool at_line =
        !message->empty() && std::isdigit(static_cast<unsigned char>((*message)[0]));
    *message = path + (at_line ? ":" : ": ") + *message;
  }
  return result;
}

}  // namespace sc::input
