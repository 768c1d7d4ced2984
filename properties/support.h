// Shared plumbing of the property files: the variant under test and the device.
//
// The variant comes from the environment variable SC_VARIANT (default: the fully patched one),
// so that one binary checks upstream, fixes and mutants alike.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/port/behaviour.h"
#include "sim/port/torch_pch.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

// The behaviour named by SC_VARIANT, or the fully patched one; aborts on an unknown name.
const sut::Behaviour& variant_under_test();
// The accelerator for diff properties (sut::pick_device()).
torch::Device device();

// What `f` raised: the first line of the port's c10::Error or of the worker's reply, "" when it
// returned.
std::string raised_by(const std::function<void()>& f);
// The Megatron tree named by SC_MEGATRON_TREE, or nullopt.
std::optional<rig::MegatronTarget> megatron_tree();
// The same inside a property that runs real code, which fails (RC_FAIL) without a tree.
rig::MegatronTarget tree_or_fail();
// Whether the properties run against real Megatron code: SC_SUT=megatron (with a tree in
// SC_MEGATRON_TREE) rather than the port (SC_SUT unset or "port"). Exits 2 on any other value,
// or on "megatron" without a tree.
bool real_code_under_test();
// The system under test for the port variant `behaviour`: the port, or the Megatron tree, whose
// code then stands in for the variant (`behaviour` only names it in reports).
rig::Target target_for(const sut::Behaviour& behaviour);
// While alive, properties run against real Megatron code from `tree` whatever SC_SUT says (the
// benchmarks time both systems in one run; a review runs two trees), named `name` in messages
// (default: the tree's folder). Scopes nest: when one ends, the one around it is in force again.
class RealCodeScope {
 public:
  explicit RealCodeScope(rig::MegatronTarget tree, std::string name = "");
  ~RealCodeScope();
  RealCodeScope(const RealCodeScope&) = delete;
  RealCodeScope& operator=(const RealCodeScope&) = delete;

 private:
  std::optional<rig::MegatronTarget> outer_tree_;
  std::string outer_name_;
};
// Who a failure is about, for its first words: "variant NAME" on the port, "megatron LABEL"
// against real code (the real_code_label of SC_MEGATRON_NAME and SC_MEGATRON_PATCHES, which
// shardcheck-verify and verify-megatron --case set to the user's tree and patches, else of the
// tree's folder; a RealCodeScope's own name while one is alive).
std::string under_test(const sut::Behaviour& behaviour);
// A real-code tree as failure messages name it: the folder's or archive's name, then the
// patches applied to it, ours by their ids ("d8b71082 with pr6982, F3, my-fix").
std::string real_code_label(const std::string& tree, const std::vector<std::string>& patches);
// The system under test's side of a "SIDE got, reference wanted" message: "port" or "megatron".
const char* tested_side();
// Runs one step of `rank` to completion: "" when it returned, else what it raised, as the first
// line of the message without a leading exception type (the port's c10::Error and the real code's
// "RuntimeError: ..." then read alike).
std::string step_outcome(rig::RankUnderTest& rank, const model::StepInputs& in);
// Sets up case generation: with SC_TRANSFORMER_ENGINE=off every case is drawn in the configuration
// without Transformer Engine, else (unset or "on") a quarter of them are. Exits 2 on any other
// value. Call once, before any property.
void configure_generation();

}  // namespace sc::props
