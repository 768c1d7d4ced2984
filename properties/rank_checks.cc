#include "properties/rank_checks.h"

#include <rapidcheck.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "properties/support.h"
#include "sim/rig/fma_probe.h"

namespace sc::props {

namespace {

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

// Every element of a param's optimizer state, gathered from the pieces of all DP ranks.
struct FullState {
  std::vector<float> exp_avg, exp_avg_sq, master;
  std::set<int64_t> steps;  // the step count every piece of the param reports
};

std::string steps_text(const std::set<int64_t>& steps) {
  std::string out;
  for (int64_t s : steps) out += (out.empty() ? "{" : ", ") + std::to_string(s);
  return out + "}";
}

// The optimizer state of every param of `instance`, read from `group` (all DP ranks of `c`).
std::map<int, FullState> full_state(const model::CaseSpec& c, model::Instance instance,
                                    const std::vector<const rig::RankUnderTest*>& group) {
  const auto layouts = model::full_param_layout(c);
  std::map<int, FullState> out;
  for (size_t r = 0; r < group.size(); ++r) {
    const model::RankPlan plan = model::plan_rank(c, layouts, instance, static_cast<int64_t>(r));
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
        const model::ShardEntry& e = plan.groups[g].installed[i];
        FullState& f = out[e.param];
        const size_t n = static_cast<size_t>(c.params[e.param].numel());
        if (f.master.empty()) {
          f.exp_avg.assign(n, 0.f);
          f.exp_avg_sq.assign(n, 0.f);
          f.master.assign(n, 0.f);
        }
        const rig::ObservedState st = group[r]->state(g, i);
        const std::vector<float> master = group[r]->optimizer_piece(g, i);
        f.steps.insert(st.step);
        for (int64_t k = 0; k < e.param_range.size(); ++k) {
          const size_t at = static_cast<size_t>(e.param_range.start + k);
          f.exp_avg[at] = st.exp_avg.at(static_cast<size_t>(k));
          f.exp_avg_sq[at] = st.exp_avg_sq.at(static_cast<size_t>(k));
          f.master[at] = master.at(static_cast<size_t>(k));
        }
      }
    }
  }
  return out;
}

}  // namespace

Violation compare_exact(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what, const std::string& got_name,
                        const std::string& want_name) {
  if (got.size() != want.size()) {
    return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  for (size_t k = 0; k < got.size(); ++k) {
    if (!same_bits(got[k], want[k])) {
      std::ostringstream os;
      os.precision(9);
      os << what << ": first difference at element " << k << ": "
         << (got_name.empty() ? tested_side() : got_name) << " " << got[k] << ", "
         << (want_name.empty() ? "reference" : want_name) << " " << want[k];
      return os.str();
    }
  }
  return std::nullopt;
}

std::string entry_name(const model::CaseSpec& c, const model::RankPlan& plan, size_t g, size_t i,
                       int step) {
  std::ostringstream os;
  os << (plan.instance == model::Instance::kExpert ? "expert" : "dense") << " rank " << plan.rank
     << " step " << step << " " << c.params[plan.groups[g].installed[i].param].name << " piece "
     << plan.groups[g].installed[i].param_range;
  return os.str();
}

void check(const Violation& v, const sut::Behaviour& b) {
  if (v) RC_LOG() << under_test(b) << ": " << *v << "\n";
  RC_ASSERT(!v);
}

model::TorchCpuKernels torch_kernels() {
  const auto kernels = rig::torch_cpu_kernels();
  if (!kernels) RC_FAIL("no emulation reproduces torch's CPU AdamW kernels on this machine");
  return *kernels;
}

void check_entry(const model::CaseSpec& c, const model::RankPlan& plan,
                 const model::RankReference& ref, const rig::RankUnderTest& rig, size_t g, size_t i,
                 int k, NumericClaim claim, const sut::Behaviour& b) {
  const std::string at = entry_name(c, plan, g, i, k);
  if (claim == NumericClaim::kModelParams) {
    check(compare_exact(rig.model_piece(g, i), ref.model_piece(g, i), at), b);
  } else if (claim == NumericClaim::kUnchanged) {
    const auto& full = rig.initial_values()[plan.groups[g].installed[i].param];
    const auto& range = plan.groups[g].installed[i].param_range;
    check(compare_exact(rig.model_piece(g, i),
                        std::vector<float>(full.begin() + range.start, full.begin() + range.end),
                        at + " (must be unchanged)"),
          b);
  } else if (claim == NumericClaim::kState) {
    const rig::ObservedState got = rig.state(g, i);
    const model::AdamWState32& want = ref.state(g, i);
    if (!got.present) check(at + ": no optimizer state after a step", b);
    check(compare_exact(got.exp_avg, want.exp_avg, at + " exp_avg"), b);
    check(compare_exact(got.exp_avg_sq, want.exp_avg_sq, at + " exp_avg_sq"), b);
    check(compare_exact(got.master, ref.master_piece(g, i), at + " master"), b);
    if (got.step != want.step) {
      check(at + ": step " + std::to_string(got.step) + " != " + std::to_string(want.step), b);
    }
  }
}

Violation round_trip_difference(const model::CaseSpec& saved_case,
                                const model::CaseSpec& loaded_case, model::Instance instance,
                                const std::vector<const rig::RankUnderTest*>& saved,
                                const std::vector<const rig::RankUnderTest*>& loaded,
                                const std::string& prefix, const std::string& format) {
  const std::map<int, FullState> want = full_state(saved_case, instance, saved);
  const std::map<int, FullState> got = full_state(loaded_case, instance, loaded);
  for (const auto& [param, w] : want) {
    const FullState& x = got.at(param);
    const std::string at =
        prefix + saved_case.params[param].name + " after a " + format + " round trip";
    Violation v = compare_exact(x.exp_avg, w.exp_avg, at + ": exp_avg", "loaded", "saved");
    if (!v) v = compare_exact(x.exp_avg_sq, w.exp_avg_sq, at + ": exp_avg_sq", "loaded", "saved");
    if (!v) v = compare_exact(x.master, w.master, at + ": fp32 master", "loaded", "saved");
    if (!v && x.steps != w.steps) {
      v = at + ": step counts " + steps_text(x.steps) + " loaded, " + steps_text(w.steps) +
          " saved";
    }
    if (v) return v;
  }
  return std::nullopt;
}

}  // namespace sc::props
