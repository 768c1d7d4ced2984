// The JSON of what every case file holds (properties/case_file.h): the CaseSpec and the step
// schedule, and the reader that refuses unknown, missing and mistyped keys by their JSON path
// ("case.params[0].dtype: ..."). The properties' own extras (properties/case_extras.h) are read
// and written with it too.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/spec.h"
#include "properties/case_file_error.h"
#include "properties/gen/step_gen.h"

namespace sc::props {

using nlohmann::json;

// Throws CaseFileError("PATH: WHY").
[[noreturn]] void bad(const std::string& path, const std::string& why);

// Reads the members of one JSON object, refusing unknown and missing keys, and names the JSON
// path of what it refuses.
class CaseReader {
 public:
  CaseReader(const json& v, std::string path) : v_(v), path_(std::move(path)) {
    if (!v_.is_object()) bad(path_, std::string("expected an object, got ") + v_.type_name());
  }
  // The member `key`; nullptr when it is absent and `optional`.
  const json* get(const std::string& key, bool optional = false) {
    seen_.push_back(key);
    auto it = v_.find(key);
    if (it == v_.end()) {
      if (optional) return nullptr;
      bad(path_, "missing key \"" + key + "\"");
    }
    return &*it;
  }
  std::string at(const std::string& key) const { return path_ + "." + key; }
  bool boolean(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_boolean()) bad(at(key), std::string("expected true or false, got ") + x.type_name());
    return x.get<bool>();
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) {
    return integer_at(*get(key), at(key), lo, hi);
  }
  uint64_t unsigned_integer(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_number_unsigned()) {
      bad(at(key), std::string("expected an unsigned integer, got ") + x.type_name());
    }
    return x.get<uint64_t>();
  }
  double number(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_number()) bad(at(key), std::string("expected a number, got ") + x.type_name());
    return x.get<double>();
  }
  std::string string(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_string()) bad(at(key), std::string("expected a string, got ") + x.type_name());
    return x.get<std::string>();
  }
  const json& array(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_array()) bad(at(key), std::string("expected an array, got ") + x.type_name());
    return x;
  }
  // Fails on the first key that no get() asked for.
  void done() const {
    for (const auto& [key, value] : v_.items()) {
      (void)value;
      if (std::find(seen_.begin(), seen_.end(), key) == seen_.end()) {
        bad(at(key), "unknown key");
      }
    }
  }
  static int64_t integer_at(const json& x, const std::string& path, int64_t lo, int64_t hi) {
    if (!x.is_number_integer()) bad(path, std::string("expected an integer, got ") + x.type_name());
    const int64_t n = x.get<int64_t>();
    if (n < lo || n > hi) {
      bad(path, std::to_string(n) + " is outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
    }
    return n;
  }

 private:
  const json& v_;
  std::string path_;
  std::vector<std::string> seen_;
};

json case_json(const model::CaseSpec& c);
model::CaseSpec read_case(const json& v, const std::string& path);
json step_json(const gen::StepDraw& d);
// One step of a schedule of case `c`: one gradient kind per parameter, hyper-parameters per
// group.
gen::StepDraw read_step(const json& v, const std::string& path, const model::CaseSpec& c);
// Field by field (doubles compared exactly).
bool same_param(const model::ParamSpec& a, const model::ParamSpec& b);
bool same_step(const gen::StepDraw& s, const gen::StepDraw& t);

}  // namespace sc::props
