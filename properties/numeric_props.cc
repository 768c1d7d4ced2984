#include "properties/numeric_props.h"

#include <rapidcheck.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>

#include "model/layout.h"
#include "model/reference.h"
#include "model/shard.h"
#include "properties/checks.h"
#include "properties/coverage.h"
#include "properties/support.h"
#include "sim/rig/fma_probe.h"
#include "sim/rig/rank_under_test.h"
#include "sim/rig/tolerances.h"

namespace sc::props {

namespace {

// For every checked rank of `c`: builds it twice, from cases `x` and `y` (variations of `c`
// with the same parameters, so the same plan) and the same seed, checks that both construct,
// and calls f(rig_x, rig_y, plan).
template <typename F>
void for_rig_pairs(const model::CaseSpec& c, const model::CaseSpec& x, const model::CaseSpec& y,
                   uint64_t y_seed_offset, const sut::Behaviour& b, F f) {
  for_checked_ranks(c, [&](model::Instance inst, int64_t r, const auto& layouts) {
    const auto a_rank = rig::build_rank(target_for(b), x, inst, r, 1000 + r);
    const auto z_rank = rig::build_rank(target_for(b), y, inst, r, 1000 + y_seed_offset + r);
    rig::RankUnderTest& a = *a_rank;
    rig::RankUnderTest& z = *z_rank;
    check(check_constructed(a.construction()), b);
    check(check_constructed(z.construction()), b);
    f(a, z, model::plan_rank(c, layouts, inst, r));
  });
}

// Runs steps [split, end) of `s` on `a` (uninterrupted) and `z` (resumed) and, after each step,
// calls f(g, i, name) for every installed entry of `plan`.
template <typename F>
void continue_both(rig::RankUnderTest& a, rig::RankUnderTest& z, const model::CaseSpec& c,
                   const gen::Schedule& s, size_t split, const model::RankPlan& plan, F f) {
  for (size_t k = split; k < s.steps.size(); ++k) {
    const model::StepInputs in = gen::materialise(c, s.steps[k]);
    a.step(in);
    z.step(in);
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
        f(g, i, entry_name(c, plan, g, i, static_cast<int>(k + 1)));
      }
    }
  }
}

void classify(const model::CaseSpec& c, const gen::Schedule& s) {
  tag_coverage(c);
  RC_CLASSIFY(c.cpu_offload && c.offload_fraction == 0.0, "fraction 0");
  RC_CLASSIFY(c.cpu_offload && c.offload_fraction == 1.0, "fraction 1");
  RC_CLASSIFY(c.cpu_offload && c.offload_fraction > 0.0 && c.offload_fraction < 1.0,
              "interior fraction");
  RC_CLASSIFY(c.precision_aware && c.cpu_offload, "precision-aware with offload");
  RC_CLASSIFY(c.precision_aware && !c.cpu_offload, "precision-aware FusedAdam");
  RC_CLASSIFY(s.steps.size() > 1, "several steps");
}

// The hybrid optimizer's placement of every installed tensor against the offload plan.
void check_placement(const model::CaseSpec& c, const model::RankPlan& plan,
                     const model::RankReference& ref, const rig::RankUnderTest& rig,
                     const sut::Behaviour& b) {
  // A hybrid optimizer that groups its host sub-optimizers (proposal S1) says by how much.
  const auto min_numel = rig.construction().host_min_numel;
  const model::OffloadPlan want = min_numel ? ref.offload_plan(min_numel) : ref.offload_plan();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
      const rig::ObservedPlacement got = rig.placement(g, i);
      const model::HdoPlacement& w = want.placements[g][i];
      const bool same = got.offloaded == w.offloaded && got.fp32_copy == w.fp32_copy &&
                        got.host_pinned == w.host_pinned && got.cpu_optimizer == w.cpu_optimizer;
      if (!same) {
        std::ostringstream os;
        os << entry_name(c, plan, g, i, 0) << ": " << tested_side() << " offloaded=" << got.offloaded
           << " fp32_copy=" << got.fp32_copy << " pinned=" << got.host_pinned
           << " cpu_optimizer=" << got.cpu_optimizer << "; plan offloaded=" << w.offloaded
           << " fp32_copy=" << w.fp32_copy << " pinned=" << w.host_pinned
           << " cpu_optimizer=" << w.cpu_optimizer;
        check(os.str(), b);
      }
    }
  }
  check(rig.num_cpu_optimizers() == want.num_cpu_optimizers &&
                rig.has_accelerator_optimizer() == want.has_accelerator_optimizer
            ? Violation()
            : Violation("number of sub-optimizers differs from the plan"),
        b);
}

// The model predicts that the optimizer refuses the first step with `want`: the port must raise
// exactly that.
void check_step_refused(const model::CaseSpec& c, const gen::Schedule& s, const std::string& want,
                        rig::RankUnderTest& rig, const sut::Behaviour& b) {
  RC_TAG("step refused");
  const std::string raised = step_outcome(rig, gen::materialise(c, s.steps.front()));
  Violation v;
  if (raised.empty()) {
    v = "the first step succeeded; the reference expects: " + want;
  } else if (raised != want) {
    v = "the first step raised \"" + raised + "\"; the reference expects \"" + want + "\"";
  }
  check(v, b);
}

}  // namespace

void run_numeric_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                          const sut::Behaviour& behaviour, NumericClaim claim,
                          const rig::StreamSchedule& streams) {
  classify(spec, schedule);
  const model::TorchCpuKernels kernels = torch_kernels();
  for_checked_ranks(spec, [&](model::Instance inst, int64_t r, const auto& layouts) {
    const auto owned = rig::build_rank(target_for(behaviour), spec, inst, r,
                                       /*seed=*/1000 + r, streams);
    rig::RankUnderTest& rig = *owned;
    check(check_constructed(rig.construction()), behaviour);
    const model::RankPlan plan = model::plan_rank(spec, layouts, inst, r);
    model::RankReference ref(spec, plan, rig.initial_values(), kernels, device().is_cuda());
    if (claim == NumericClaim::kPlacement) {
      if (spec.cpu_offload) check_placement(spec, plan, ref, rig, behaviour);
      return;
    }
    if (const auto& want = ref.step_error()) {
      check_step_refused(spec, schedule, *want, rig, behaviour);
      return;
    }
    for (size_t k = 0; k < schedule.steps.size(); ++k) {
      const model::StepInputs in = gen::materialise(spec, schedule.steps[k]);
      rig.step(in);
      ref.step(in);
      for (size_t g = 0; g < plan.groups.size(); ++g) {
        for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
          check_entry(spec, plan, ref, rig, g, i, static_cast<int>(k + 1), claim, behaviour);
        }
      }
    }
  });
}

void run_offload_invariance(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            const sut::Behaviour& behaviour, double other_fraction) {
  RC_PRE(spec.cpu_offload);
  model::CaseSpec other = spec;
  other.offload_fraction = other_fraction;
  RC_CLASSIFY(spec.precision_aware, "precision-aware");
  const double lr_max = gen::max_lr(schedule);
  for_rig_pairs(
      spec, spec, other, 0, behaviour,
      [&](rig::RankUnderTest& a, rig::RankUnderTest& z, const model::RankPlan& plan) {
        for (size_t k = 0; k < schedule.steps.size(); ++k) {
          const model::StepInputs in = gen::materialise(spec, schedule.steps[k]);
          a.step(in);
          z.step(in);
        }
        for (size_t g = 0; g < plan.groups.size(); ++g) {
          for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
            const model::DType dt = spec.params[plan.groups[g].installed[i].param].dtype;
            const std::vector<float> x = a.model_piece(g, i), y = z.model_piece(g, i);
            for (size_t e = 0; e < x.size(); ++e) {
              const int steps = static_cast<int>(schedule.steps.size());
              const double tol = dt == model::DType::kFloat32
                                     ? tol::op_order_fp32(x[e], lr_max, steps)
                                     : tol::op_order_16bit(x[e], lr_max, steps,
                                                           dt == model::DType::kBFloat16 ? 7 : 10);
              if (!(std::fabs(static_cast<double>(x[e]) - y[e]) <= tol)) {
                std::ostringstream os;
                os.precision(9);
                os << entry_name(spec, plan, g, i, steps) << " element " << e << ": fraction "
                   << spec.offload_fraction << " gives " << x[e] << ", fraction " << other_fraction
                   << " gives " << y[e] << " (tolerance " << tol << ")";
                check(os.str(), behaviour);
              }
            }
          }
        }
      });
}

void run_hdo_against_plain(const model::CaseSpec& spec, const gen::Schedule& schedule,
                           const sut::Behaviour& behaviour) {
  model::CaseSpec hdo = spec, plain = spec;
  hdo.cpu_offload = true;
  hdo.offload_fraction = 1.0;
  plain.cpu_offload = false;
  plain.precision_aware = false;
  // The host side is torch's AdamW whether or not TE is installed: compare with the plain
  // optimizer that is torch's AdamW too (without TE; with it the factory's Adam is FusedAdam).
  // On 2.11 the host side runs the fused kernel and the plain optimizer the single-tensor loop:
  // they agree within tol::torch_kernels_*, not bit for bit.
  plain.transformer_engine = false;
  RC_CLASSIFY(spec.precision_aware, "precision-aware hybrid optimizer");
  const double lr_max = gen::max_lr(schedule);
  for_rig_pairs(
      spec, hdo, plain, 0, behaviour,
      [&](rig::RankUnderTest& a, rig::RankUnderTest& p, const model::RankPlan& plan) {
        for (size_t k = 0; k < schedule.steps.size(); ++k) {
          const model::StepInputs in = gen::materialise(spec, schedule.steps[k]);
          a.step(in);
          p.step(in);
          for (size_t g = 0; g < plan.groups.size(); ++g) {
            for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
              const model::DType dt = spec.params[plan.groups[g].installed[i].param].dtype;
              const std::vector<float> x = a.model_piece(g, i), y = p.model_piece(g, i);
              const int steps = static_cast<int>(k + 1);
              for (size_t e = 0; e < x.size(); ++e) {
                const double tol =
                    dt == model::DType::kFloat32
                        ? tol::torch_kernels_fp32(y[e], lr_max, steps)
                        : tol::torch_kernels_16bit(y[e], lr_max, steps, model::mantissa_bits(dt),
                                                   model::min_subnormal(dt));
                if (std::fabs(static_cast<double>(x[e]) - y[e]) <= tol) continue;
                std::ostringstream os;
                os.precision(9);
                os << entry_name(spec, plan, g, i, steps) << " element " << e << ": hybrid " << x[e]
                   << ", plain " << y[e] << " (tolerance " << tol << ")";
                check(os.str(), behaviour);
              }
            }
          }
        }
      });
}

namespace {

// Each group's hyper-parameters of `loaded` against those of `saved`, right after a load and
// before a step rewrites lr and weight decay: a group matched to the wrong saved group shows only
// here (MEG-06).
void check_hyper_after_load(const rig::RankUnderTest& saved, const rig::RankUnderTest& loaded,
                            int64_t rank, const sut::Behaviour& b) {
  const std::vector<model::AdamWHyper> want = saved.group_hyper_parameters(),
                                       got = loaded.group_hyper_parameters();
  if (got.size() != want.size()) {
    check("rank " + std::to_string(rank) + ": " + std::to_string(got.size()) +
              " groups after the load, " + std::to_string(want.size()) + " saved",
          b);
  }
  for (size_t g = 0; g < want.size() && g < got.size(); ++g) {
    const model::AdamWHyper &x = got[g], &y = want[g];
    if (x == y) continue;
    std::ostringstream os;
    os.precision(9);
    os << "rank " << rank << " group " << g << " after the load: lr " << x.lr << " wd "
       << x.weight_decay << " beta1 " << x.beta1 << " beta2 " << x.beta2 << " eps " << x.eps
       << "; saved lr " << y.lr << " wd " << y.weight_decay << " beta1 " << y.beta1 << " beta2 "
       << y.beta2 << " eps " << y.eps;
    check(os.str(), b);
  }
}

// The whole optimizer state of `loaded` right after it loaded what `saved` saved, entry by entry:
// presence, moments, master, the stepped tensor and the step count (per parameter, or the
// group's where the optimizer keeps it there), then every group's hyper-parameters.
void check_state_after_load(const rig::RankUnderTest& saved, const rig::RankUnderTest& loaded,
                            const model::CaseSpec& c, const model::RankPlan& plan, int step,
                            const sut::Behaviour& b) {
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
      const std::string at = entry_name(c, plan, g, i, step) + " right after the load: ";
      const rig::ObservedState x = loaded.state(g, i), y = saved.state(g, i);
      if (x.present != y.present) {
        check(at + (x.present ? "state present, none saved" : "no state, saved had some"), b);
        continue;
      }
      check(compare_exact(x.exp_avg, y.exp_avg, at + "exp_avg (loaded vs saved)"), b);
      check(compare_exact(x.exp_avg_sq, y.exp_avg_sq, at + "exp_avg_sq (loaded vs saved)"), b);
      check(compare_exact(x.master, y.master, at + "master (loaded vs saved)"), b);
      check(compare_exact(loaded.optimizer_piece(g, i), saved.optimizer_piece(g, i),
                          at + "stepped tensor (loaded vs saved)"),
            b);
      if (x.step != y.step) {
        check(at + "step " + std::to_string(x.step) + " loaded, " + std::to_string(y.step) +
                  " saved",
              b);
      }
    }
  }
  check_hyper_after_load(saved, loaded, plan.rank, b);
}

}  // namespace

void run_save_load_continue(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            size_t split, const sut::Behaviour& behaviour) {
  RC_PRE(spec.cpu_offload && split >= 1 && split < schedule.steps.size());
  RC_CLASSIFY(spec.precision_aware, "precision-aware");
  RC_CLASSIFY(spec.offload_fraction < 1.0, "some pieces on the accelerator");
  // The fresh rank has other initial values: everything must come from the checkpoint.
  for_rig_pairs(spec, spec, spec, 1000, behaviour,
                [&](rig::RankUnderTest& a, rig::RankUnderTest& z, const model::RankPlan& plan) {
                  for (size_t k = 0; k < split; ++k)
                    a.step(gen::materialise(spec, schedule.steps[k]));
                  z.load(a.save());
                  check_state_after_load(a, z, spec, plan, static_cast<int>(split), behaviour);
                  continue_both(a, z, spec, schedule, split, plan,
                                [&](size_t g, size_t i, const std::string& at) {
                                  check(compare_exact(z.model_piece(g, i), a.model_piece(g, i),
                                                      at + " (resumed vs uninterrupted)"),
                                        behaviour);
                                });
                });
}

void run_load_placement(const model::CaseSpec& spec, const gen::Schedule& schedule, size_t split,
                        bool map_to_host, const sut::Behaviour& behaviour) {
  RC_PRE(spec.cpu_offload && split >= 1 && split < schedule.steps.size());
  RC_CLASSIFY(map_to_host, "state dict mapped to the host");
  RC_CLASSIFY(spec.offload_fraction > 0.0 && spec.offload_fraction < 1.0,
              "both sub-optimizer kinds");
  for_rig_pairs(
      spec, spec, spec, 1000, behaviour,
      [&](rig::RankUnderTest& a, rig::RankUnderTest& z, const model::RankPlan& plan) {
        model::RankReference ref(spec, plan, a.initial_values(), torch_kernels(), false);
        RC_PRE(!ref.step_error());
        const model::OffloadPlan& want = ref.offload_plan();
        for (size_t k = 0; k < split; ++k) a.step(gen::materialise(spec, schedule.steps[k]));
        z.load(a.save(), map_to_host);
        check_state_after_load(a, z, spec, plan, static_cast<int>(split), behaviour);
        // Every tensor the sub-optimizer of a piece reads lives where that sub-optimizer runs: the
        // host for an offloaded piece, the accelerator for the others.
        for (size_t g = 0; g < plan.groups.size(); ++g) {
          for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
            const bool host = want.placements[g][i].offloaded;
            const rig::ObservedPlacement got = z.placement(g, i);
            auto where = [](bool on_host) { return on_host ? "the host" : "the accelerator"; };
            const std::string at =
                entry_name(spec, plan, g, i, static_cast<int>(split)) + " after the load: ";
            if (got.stepped_on_host != host) {
              check(at + "the stepped tensor is on " + where(got.stepped_on_host) + ", its " +
                        "sub-optimizer runs on " + where(host),
                    behaviour);
            }
            for (const auto& [name, on_host] : got.state_on_host) {
              if (on_host != host) {
                check(at + name + " is on " + where(on_host) + ", its sub-optimizer runs on " +
                          where(host),
                      behaviour);
              }
            }
          }
        }
        // And the kernels take them: both runs continue to the same values.
        continue_both(a, z, spec, schedule, split, plan,
                      [&](size_t g, size_t i, const std::string& at) {
                        check(compare_exact(z.model_piece(g, i), a.model_piece(g, i),
                                            at + " (resumed vs uninterrupted)"),
                              behaviour);
                      });
      });
}

namespace {

std::vector<int64_t> all_ranks(const model::CaseSpec& c, model::Instance instance) {
  std::vector<int64_t> out(static_cast<size_t>(model::instance_dp(c, instance)));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

// Builds DP ranks `ranks` of `instance` of `c` (seeds `seed` + r), checks that each constructs.
std::vector<std::unique_ptr<rig::RankUnderTest>> build_dp_group(const model::CaseSpec& c,
                                                                model::Instance instance,
                                                                const std::vector<int64_t>& ranks,
                                                                uint64_t seed,
                                                                const sut::Behaviour& b) {
  std::vector<std::unique_ptr<rig::RankUnderTest>> group;
  for (int64_t r : ranks) {
    group.push_back(rig::build_rank(target_for(b), c, instance, r, seed + r));
    check(check_constructed(group.back()->construction()), b);
  }
  return group;
}

std::vector<const rig::RankUnderTest*> views(
    const std::vector<std::unique_ptr<rig::RankUnderTest>>& group) {
  std::vector<const rig::RankUnderTest*> out;
  for (const auto& r : group) out.push_back(r.get());
  return out;
}

// DP rank ranks[k] of `saved` (stepped `split` times) against the same rank of `resumed`, loaded
// from the saved group: the state right after the load, then every step after it, bit for bit.
void check_resumed_group(const model::CaseSpec& spec, const gen::Schedule& schedule, size_t split,
                         model::Instance instance, const std::vector<int64_t>& ranks,
                         std::vector<std::unique_ptr<rig::RankUnderTest>>& saved,
                         std::vector<std::unique_ptr<rig::RankUnderTest>>& resumed,
                         const sut::Behaviour& behaviour) {
  const auto layouts = model::full_param_layout(spec);
  for (size_t k = 0; k < ranks.size(); ++k) {
    rig::RankUnderTest& a = *saved[k];
    rig::RankUnderTest& z = *resumed[k];
    const model::RankPlan plan = model::plan_rank(spec, layouts, instance, ranks[k]);
    check_state_after_load(a, z, spec, plan, static_cast<int>(split), behaviour);
    continue_both(
        a, z, spec, schedule, split, plan, [&](size_t g, size_t i, const std::string& at) {
          check(compare_exact(z.model_piece(g, i), a.model_piece(g, i),
                              at + " (resumed vs uninterrupted)"),
                behaviour);
          check(compare_exact(z.optimizer_piece(g, i), a.optimizer_piece(g, i),
                              at + " master (resumed vs uninterrupted)"),
                behaviour);
          const rig::ObservedState x = z.state(g, i), y = a.state(g, i);
          check(compare_exact(x.exp_avg, y.exp_avg, at + " exp_avg (resumed vs uninterrupted)"),
                behaviour);
          if (x.step != y.step) {
            check(at + ": step " + std::to_string(x.step) + " resumed, " + std::to_string(y.step) +
                      " uninterrupted",
                  behaviour);
          }
        });
  }
}

}  // namespace

void run_dist_ckpt_resume(const model::CaseSpec& spec, const gen::Schedule& schedule, size_t split,
                          const sut::Behaviour& behaviour) {
  RC_PRE(split >= 1 && split < schedule.steps.size());
  RC_CLASSIFY(spec.cpu_offload, "hybrid optimizer");
  RC_CLASSIFY(spec.precision_aware && !spec.cpu_offload, "precision-aware FusedAdam");
  RC_CLASSIFY(!spec.precision_aware && !spec.cpu_offload, "torch AdamW");
  const auto layouts = model::full_param_layout(spec);
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    // The checked ranks (all up to DP 8) stand for the group; DP rank 0, which writes the
    // common state, is always among them.
    const std::vector<int64_t> ranks = ranks_to_check(spec, layouts, inst);
    auto saved = build_dp_group(spec, inst, ranks, 1000, behaviour);
    for (size_t k = 0; k < ranks.size(); ++k) {
      // A refused step (the model predicts it) is another property's business.
      model::RankReference ref(spec, model::plan_rank(spec, layouts, inst, ranks[k]),
                               saved[k]->initial_values(), torch_kernels(), false);
      RC_PRE(!ref.step_error());
    }
    for (size_t k = 0; k < split; ++k) {
      const model::StepInputs in = gen::materialise(spec, schedule.steps[k]);
      for (auto& a : saved) a->step(in);
    }
    // Per-param flags that some optimizers keep: the checkpoint must skip them (MEG-07).
    for (auto& a : saved) a->add_non_tensor_state({"found_inf", "non_tensor_int"});
    const std::vector<rig::Checkpoint> ck = rig::save_distributed(views(saved));
    auto resumed = build_dp_group(spec, inst, ranks, 2000, behaviour);
    for (size_t k = 0; k < ranks.size(); ++k) {
      const std::string raised = raised_by([&] { resumed[k]->load_distributed(ck[k]); });
      if (!raised.empty()) {
        check("DP rank " + std::to_string(ranks[k]) +
                  ": loading the distributed checkpoint raised: " + raised,
              behaviour);
      }
    }
    check_resumed_group(spec, schedule, split, inst, ranks, saved, resumed, behaviour);
  }
}

namespace {

// Steps every checked rank of `c` through `s` with the stream simulation recording, and fails
// when `findings(rig)` (one report per offending operation) is not empty.
template <typename Findings>
void check_recorded_streams(const model::CaseSpec& c, const gen::Schedule& s,
                            const sut::Behaviour& b, const std::string& what, Findings findings) {
  for_checked_ranks(c, [&](model::Instance inst, int64_t r, const auto& layouts) {
    (void)layouts;
    const auto owned =
        rig::build_rank(target_for(b), c, inst, r, /*seed=*/1000 + r,
                        rig::StreamSchedule{model::streams::Policy::kEager, 0, true});
    rig::RankUnderTest& rig = *owned;
    check(check_constructed(rig.construction()), b);
    for (const gen::StepDraw& d : s.steps) rig.step(gen::materialise(c, d));
    const std::vector<std::string> found = findings(rig);
    if (!found.empty()) {
      check((inst == model::Instance::kExpert ? "expert" : "dense") + std::string(" rank ") +
                std::to_string(r) + ": " + std::to_string(found.size()) + " " + what +
                "; first: " + found.front(),
            b);
    }
  });
}

}  // namespace

void run_gathered_ckpt_round_trip(const model::CaseSpec& spec, const gen::Schedule& schedule,
                                  rig::GatheredFormat format, int other_dp,
                                  const sut::Behaviour& behaviour) {
  const bool reshard = other_dp > 0;
  RC_CLASSIFY(format == rig::GatheredFormat::kDpZero, "dp_zero_gather_scatter");
  RC_CLASSIFY(format == rig::GatheredFormat::kFullyReshardable, "fully_reshardable");
  RC_CLASSIFY(reshard, "other DP size");
  model::CaseSpec other = spec;
  if (reshard) other.dp = other.expert_dp = other_dp;
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    const char* name = inst == model::Instance::kExpert ? "expert" : "dense";
    std::vector<std::unique_ptr<rig::RankUnderTest>> saved =
        build_dp_group(spec, inst, all_ranks(spec, inst), 1000, behaviour);
    // A refused step (the model predicts it) is another property's business.
    const auto layouts = model::full_param_layout(spec);
    for (size_t r = 0; r < saved.size(); ++r) {
      model::RankReference ref(spec, model::plan_rank(spec, layouts, inst, static_cast<int64_t>(r)),
                               saved[r]->initial_values(), torch_kernels(), false);
      RC_PRE(!ref.step_error());
    }
    for (const gen::StepDraw& d : schedule.steps) {
      const model::StepInputs in = gen::materialise(spec, d);
      for (auto& rig : saved) rig->step(in);
    }
    const rig::GatheredCheckpoint ck = rig::save_gathered(views(saved), format);
    std::vector<std::unique_ptr<rig::RankUnderTest>> loaded =
        build_dp_group(other, inst, all_ranks(other, inst), 3000, behaviour);
    for (auto& rig : loaded) {
      Violation v;
      try {
        rig->load_gathered(ck);
      } catch (const c10::Error& e) {
        v = std::string(name) + ": loading the " + rig::format_name(format) +
            " checkpoint raised: " + e.msg();
      }
      check(v, behaviour);
    }
    check(round_trip_difference(spec, other, inst, views(saved), views(loaded),
                                std::string(name) + " ", rig::format_name(format)),
          behaviour);
  }
}

void run_stream_race_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                              const sut::Behaviour& behaviour) {
  RC_CLASSIFY(spec.overlap_cpu_optimizer_d2h_h2d, "overlap on");
  RC_CLASSIFY(spec.precision_aware, "precision-aware");
  check_recorded_streams(spec, schedule, behaviour, "race(s)",
                         [](const rig::RankUnderTest& rig) { return rig.stream_races(); });
}

void run_pinned_copies_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                                const sut::Behaviour& behaviour) {
  check_recorded_streams(spec, schedule, behaviour,
                         "non-blocking copy(ies) with pageable host memory",
                         [](const rig::RankUnderTest& rig) { return rig.pageable_copies(); });
}

}  // namespace sc::props
