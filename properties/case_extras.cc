#include "properties/case_extras.h"

#include <algorithm>

#include "properties/overloaded.h"

namespace sc::props {

namespace {

json command_json(const StateCommand& command) {
  json out{{"command", command_name(command)}};
  std::visit(Overloaded{[&](const state_cmd::Step& x) { out["step"] = step_json(x.draw); },
                        [&](const state_cmd::SetHyper& x) {
                          out["group"] = x.group;
                          out["value"] = x.value;
                        },
                        [&](const state_cmd::ZeroGrad& x) { out["set_to_none"] = x.set_to_none; },
                        [](const auto&) {}},
             command);
  return out;
}

StateCommand read_command(const json& v, const std::string& path, const model::CaseSpec& c) {
  CaseReader r(v, path);
  const std::string name = r.string("command");
  StateCommand k;
  if (name == "Step") {
    k = state_cmd::Step{read_step(*r.get("step"), r.at("step"), c)};
  } else if (name == "SetLr" || name == "SetWd") {
    state_cmd::SetHyper x;
    x.lr = name == "SetLr";
    x.group = static_cast<int>(r.integer("group", 0, c.num_groups() - 1));
    x.value = r.number("value");
    if (!(x.value >= 0.0 && x.value <= 1.0)) bad(r.at("value"), "must lie in [0, 1]");
    k = x;
  } else if (name == "ZeroGrad") {
    k = state_cmd::ZeroGrad{r.boolean("set_to_none")};
  } else if (name == "SaveState") {
    k = state_cmd::SaveState{};
  } else if (name == "Rebuild+LoadState") {
    k = state_cmd::RebuildAndLoadState{};
  } else if (name == "ReloadModelParams") {
    k = state_cmd::ReloadModelParams{};
  } else {
    bad(r.at("command"), "unknown command \"" + name +
                             "\" (Step, SetLr, SetWd, ZeroGrad, SaveState, Rebuild+LoadState, "
                             "ReloadModelParams)");
  }
  r.done();
  return k;
}

bool same_command(const StateCommand& a, const StateCommand& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<state_cmd::Step>(&a)) {
    return same_step(x->draw, std::get<state_cmd::Step>(b).draw);
  }
  if (const auto* x = std::get_if<state_cmd::SetHyper>(&a)) {
    const auto& y = std::get<state_cmd::SetHyper>(b);
    return x->group == y.group && x->lr == y.lr && x->value == y.value;
  }
  if (const auto* x = std::get_if<state_cmd::ZeroGrad>(&a)) {
    return x->set_to_none == std::get<state_cmd::ZeroGrad>(b).set_to_none;
  }
  return true;  // the commands without fields
}

bool same_commands(const CaseInputs& a, const CaseInputs& b) {
  if (a.commands.size() != b.commands.size()) return false;
  for (size_t k = 0; k < a.commands.size(); ++k) {
    if (!same_command(a.commands[k], b.commands[k])) return false;
  }
  return true;
}

CaseExtra split_extra() {
  return {"split", "save/load properties: steps run before the checkpoint",
          [](const CaseInputs& in) { return json(in.split); },
          [](CaseReader& r, CaseInputs& in) {
            in.split = static_cast<size_t>(r.integer("split", 0, 1 << 20));
            if (in.split > in.schedule.steps.size()) {
              bad("split", "larger than the number of steps");
            }
          },
          [](const CaseInputs& a, const CaseInputs& b) { return a.split == b.split; }};
}

CaseExtra other_fraction_extra() {
  return {"other_fraction", "offload invariance: the fraction compared against",
          [](const CaseInputs& in) { return json(in.other_fraction); },
          [](CaseReader& r, CaseInputs& in) {
            in.other_fraction = r.number("other_fraction");
            if (!(in.other_fraction >= 0.0 && in.other_fraction <= 1.0)) {
              bad("other_fraction", "must lie in [0, 1]");
            }
          },
          [](const CaseInputs& a, const CaseInputs& b) {
            return a.other_fraction == b.other_fraction;
          }};
}

CaseExtra checkpoint_format_extra() {
  return {"checkpoint_format",
          "gathered checkpoints: \"dp_zero_gather_scatter\" or \"fully_reshardable\"",
          [](const CaseInputs& in) { return json(in.checkpoint_format); },
          [](CaseReader& r, CaseInputs& in) {
            in.checkpoint_format = r.string("checkpoint_format");
            const std::string& format = in.checkpoint_format;
            if (!format.empty() && format != "dp_zero_gather_scatter" &&
                format != "fully_reshardable") {
              bad("checkpoint_format",
                  "unknown format \"" + format +
                      "\" (dp_zero_gather_scatter, fully_reshardable or empty)");
            }
          },
          [](const CaseInputs& a, const CaseInputs& b) {
            return a.checkpoint_format == b.checkpoint_format;
          }};
}

CaseExtra other_dp_extra() {
  return {"other_dp", "gathered checkpoints: the DP size that loads it (0: the case's own)",
          [](const CaseInputs& in) { return json(in.other_dp); },
          [](CaseReader& r, CaseInputs& in) {
            in.other_dp = static_cast<int>(r.integer("other_dp", 0, 4096));
            if (in.other_dp != 0 && in.checkpoint_format != "fully_reshardable") {
              bad("other_dp", "only a fully_reshardable checkpoint loads at another DP size");
            }
          },
          [](const CaseInputs& a, const CaseInputs& b) { return a.other_dp == b.other_dp; }};
}

CaseExtra map_location_extra() {
  return {
      "map_location",
      "load placement: \"cpu\" when the state dict is read with map_location=\"cpu\"; "
      "absent when each tensor is read where it was saved",
      [](const CaseInputs& in) {
        return in.map_location.empty() ? json(nullptr) : json(in.map_location);
      },
      [](CaseReader& r, CaseInputs& in) {
        in.map_location = r.string("map_location");
        if (in.map_location != "cpu") {
          bad("map_location", "unknown map location \"" + in.map_location +
                                  "\" (\"cpu\", or leave the key out to read tensors where saved)");
        }
      },
      [](const CaseInputs& a, const CaseInputs& b) { return a.map_location == b.map_location; }};
}

CaseExtra rank_extra() {
  return {"rank", "the stateful property: the dense DP rank it drives",
          [](const CaseInputs& in) { return json(in.rank); },
          [](CaseReader& r, CaseInputs& in) { in.rank = r.integer("rank", 0, in.c.dp - 1); },
          [](const CaseInputs& a, const CaseInputs& b) { return a.rank == b.rank; }};
}

CaseExtra commands_extra() {
  return {"commands", "the stateful property: its command sequence",
          [](const CaseInputs& in) {
            json commands = json::array();
            for (const StateCommand& k : in.commands) commands.push_back(command_json(k));
            return commands;
          },
          [](CaseReader& r, CaseInputs& in) {
            const json& commands = r.array("commands");
            for (size_t k = 0; k < commands.size(); ++k) {
              in.commands.push_back(
                  read_command(commands[k], "commands[" + std::to_string(k) + "]", in.c));
            }
          },
          same_commands};
}

}  // namespace

const std::vector<CaseExtra>& case_extras() {
  static const std::vector<CaseExtra> kExtras = {
      split_extra(),        other_fraction_extra(), checkpoint_format_extra(), other_dp_extra(),
      map_location_extra(), rank_extra(),           commands_extra()};
  return kExtras;
}

const CaseExtra* find_case_extra(std::string_view key) {
  for (const CaseExtra& e : case_extras()) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

std::string command_name(const StateCommand& command) {
  return std::visit(
      Overloaded{[](const state_cmd::Step&) { return "Step"; },
                 [](const state_cmd::SetHyper& x) { return x.lr ? "SetLr" : "SetWd"; },
                 [](const state_cmd::ZeroGrad&) { return "ZeroGrad"; },
                 [](const state_cmd::SaveState&) { return "SaveState"; },
                 [](const state_cmd::RebuildAndLoadState&) { return "Rebuild+LoadState"; },
                 [](const state_cmd::ReloadModelParams&) { return "ReloadModelParams"; }},
      command);
}

}  // namespace sc::props
