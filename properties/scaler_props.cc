#include "properties/scaler_props.h"

#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "model/grad_scaler.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"
#include "properties/support.h"
#include "sim/port/grad_scaler.h"
#include "sim/rig/grad_scalers.h"

namespace sc::props {

namespace {

enum class ScalerCommand { kFinite, kNonFinite, kSaveAndLoad };

// A power of two from 1 to 2^32 (what Megatron's scales are), or any positive float.
rc::Gen<float> positive_scale() {
  return gen::weighted_one_of<float>(
      {{3, rc::gen::map(rc::gen::inRange(0, 33), [](int k) { return float(int64_t{1} << k); })},
       {1, rc::gen::map(rc::gen::inRange(1, 1 << 20), [](int x) { return x / 7.0f; })}});
}

// Arguments; about one case in eight breaks one of the constructor's assertions.
rc::Gen<model::GradScalerConfig> scaler_config() {
  return rc::gen::exec([] {
    model::GradScalerConfig c;
    c.dynamic = *gen::weighted_choice<bool>({{3, true}, {1, false}});
    c.initial_scale = *positive_scale();
    c.min_scale = *gen::weighted_one_of<float>(
        {{2, rc::gen::just(1.0f)},
         {2, rc::gen::map(rc::gen::inRange(0, 8),
                          [s = c.initial_scale](int k) { return s / float(1 << k); })}});
    c.growth_factor = *gen::weighted_choice<float>({{3, 2.0f}, {1, 1.5f}, {1, 3.0f}});
    c.backoff_factor = *gen::weighted_choice<float>({{3, 0.5f}, {1, 0.25f}, {1, 0.7f}});
    c.growth_interval = *rc::gen::inRange<int64_t>(1, 6);
    c.hysteresis = *rc::gen::inRange<int64_t>(1, 5);
    switch (*gen::weighted_choice<int>({{28, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}})) {
      case 1: c.min_scale = c.initial_scale * 2.0f; break;
      case 2: c.growth_factor = 1.0f; break;
      case 3: c.backoff_factor = 1.0f; break;
      case 4: c.hysteresis = 0; break;
      default: break;
    }
    return c;
  });
}

float first_float(const torch::Tensor& t) { return t.cpu().item<float>(); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The port's state in the model's terms.
model::GradScalerState port_state(const sut::GradScaler& s) {
  model::GradScalerState out;
  out.scale = first_float(s.scale());
  if (const auto* d = dynamic_cast<const sut::DynamicGradScaler*>(&s)) {
    out.growth_tracker = d->growth_tracker();
    out.hysteresis_tracker = d->hysteresis_tracker();
  }
  return out;
}

std::string text(const model::GradScalerState& s) {
  std::ostringstream os;
  os.precision(9);
  os << "scale " << s.scale << ", growth tracker " << s.growth_tracker << ", hysteresis tracker "
     << s.hysteresis_tracker;
  return os.str();
}

void require_same(const sut::GradScaler& port, const model::GradScalerModel& want,
                  bool dynamic, size_t after, const sut::Behaviour& b) {
  model::GradScalerState got = port_state(port), expected = want.state();
  if (!dynamic) expected.growth_tracker = expected.hysteresis_tracker = 0;
  const float inv = first_float(port.inv_scale());
  if (same_bits(got.scale, expected.scale) && got == expected && same_bits(inv, want.inv_scale())) {
    return;
  }
  RC_LOG() << under_test(b) << ": after command " << after << ": port " << text(got)
           << ", inv_scale " << inv << "; model " << text(expected) << ", inv_scale "
           << want.inv_scale() << "\n";
  RC_FAIL("the loss scaler differs from the model");
}

}  // namespace

void run_grad_scaler_property(const sut::Behaviour& behaviour) {
  const model::GradScalerConfig config = *rc::gen::resize(rc::kNominalSize, scaler_config());
  const auto commands = *rc::gen::container<std::vector<ScalerCommand>>(gen::weighted_choice<
      ScalerCommand>({{4, ScalerCommand::kFinite}, {3, ScalerCommand::kNonFinite},
                      {1, ScalerCommand::kSaveAndLoad}}));
  const std::string invalid = model::grad_scaler_config_error(config);
  RC_CLASSIFY(!invalid.empty(), "invalid arguments");
  RC_CLASSIFY(config.dynamic, "dynamic");
  std::unique_ptr<sut::GradScaler> port;
  std::string raised;
  try {
    port = rig::make_grad_scaler(config, device(), behaviour);
  } catch (const c10::Error& e) {
    raised = e.msg().substr(0, e.msg().find('\n'));
  }
  if (!invalid.empty() || !raised.empty()) {
    RC_LOG() << under_test(behaviour) << ": the model says '" << invalid
             << "', the port raised '" << raised << "'\n";
    RC_ASSERT(!invalid.empty() && raised.rfind("AssertionError: ", 0) == 0);
    return;
  }
  model::GradScalerModel want(config);
  require_same(*port, want, config.dynamic, 0, behaviour);
  for (size_t k = 0; k < commands.size(); ++k) {
    if (commands[k] == ScalerCommand::kSaveAndLoad) {
      const sut::GradScalerStateDict sd = port->state_dict();
      port = rig::make_grad_scaler(config, device(), behaviour);
      port->load_state_dict(sd);
      want.load(want.state());
    } else {
      const bool found_inf = commands[k] == ScalerCommand::kNonFinite;
      port->update(found_inf);
      want.update(found_inf);
    }
    require_same(*port, want, config.dynamic, k + 1, behaviour);
  }
}

}  // namespace sc::props
