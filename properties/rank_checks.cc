#include "properties/rank_checks.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include <rapidcheck.h>

#include "properties/support.h"
#include "sim/rig/fma_probe.h"

namespace sc::props {

namespace {

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

}  // namespace

Violation compare_exact(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what) {
  if (got.size() != want.size()) {
    return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  for (size_t k = 0; k < got.size(); ++k) {
    if (!same_bits(got[k], want[k])) {
      std::ostringstream os;
      os.precision(9);
      os << what << ": first difference at element " << k << ": " << tested_side() << " " << got[k]
         << ", reference " << want[k];
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

}  // namespace sc::props
