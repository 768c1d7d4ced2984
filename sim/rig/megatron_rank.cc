#include "sim/rig/megatron_rank.h"

#include <optional>
#include <stdexcept>

#include "model/layout.h"
#include "model/shard.h"

namespace sc::rig {

namespace {

using nlohmann::json;

model::DType dtype_of(const json& name) {
  const auto d = model::parse_dtype(name.get<std::string>());
  if (!d) throw MegatronWorkerLost("the Megatron worker named an unknown dtype " + name.dump());
  return *d;
}

model::Range range_of(const json& pair) { return model::Range{pair.at(0), pair.at(1)}; }

model::BufferRanges buffer_ranges_of(const json& b) {
  model::BufferRanges out{
      model::BufferKey{dtype_of(b.at("param_dtype")), dtype_of(b.at("grad_dtype")),
                       b.at("is_expert").get<bool>()},
      {}};
  for (const json& bucket : b.at("buckets")) {
    model::BucketRanges mb{range_of(bucket.at("world")), {}, {}};
    // A tree whose buckets have no `param_to_index` sends none.
    for (const json& p : bucket.value("param_index", json::array())) {
      mb.param_index.push_back({p.at(0).get<int>(), model::Range{p.at(1), p.at(2)}});
    }
    for (const json& p : bucket.at("params")) {
      mb.param_map.push_back(model::ParamRanges{
          p.at("param").get<int>(), range_of(p.at("gbuf_world")),
          range_of(p.at("gbuf_world_in_bucket")), range_of(p.at("gbuf_local")),
          range_of(p.at("param_range"))});
    }
    out.buckets.push_back(std::move(mb));
  }
  return out;
}

ObservedTensor tensor_of(const json& t) {
  ObservedTensor o;
  o.param = t.at("param");
  o.dtype = dtype_of(t.at("dtype"));
  o.numel = t.at("numel");
  o.is_leaf = t.at("is_leaf");
  o.requires_grad = t.at("requires_grad");
  o.has_grad_fn = t.at("has_grad_fn");
  o.aliases_model = t.at("aliases_model");
  o.alias_offset = t.at("alias_offset");
  o.model_has_main_param = t.at("model_has_main_param");
  return o;
}

RankObservation observation_of(const json& r, model::Instance instance, int64_t rank) {
  RankObservation obs;
  obs.instance = instance;
  obs.rank = rank;
  for (const json& b : r.at("ranges")) obs.ranges.push_back(buffer_ranges_of(b));
  for (const json& g : r.at("groups")) {
    std::vector<ObservedTensor> group;
    for (const json& t : g) group.push_back(tensor_of(t));
    obs.groups.push_back(std::move(group));
  }
  for (const json& row : r.at("index_map")) {
    obs.index_map[row.at(0).get<int>()] = {row.at(1).get<int>(), row.at(2).get<int>()};
  }
  if (!r.at("error").is_null()) obs.error = r.at("error").get<std::string>();
  obs.error_type = r.at("error_type");
  obs.failing_param = r.at("failing_param");
  obs.final_groups_match = r.at("final_groups_match");
  obs.offloaded_tensors = r.at("offloaded_tensors");
  obs.accel_bytes = r.at("accel_bytes");
  obs.host_bytes = r.at("host_bytes");
  if (r.contains("host_min_numel")) obs.host_min_numel = r.at("host_min_numel").get<int64_t>();
  return obs;
}

model::AdamWHyper hyper_of(const json& h) {
  return model::AdamWHyper{h.at("lr"), h.at("beta1"), h.at("beta2"), h.at("eps"),
                           h.at("weight_decay")};
}

json hyper_request(const model::AdamWHyper& h) {
  return {{"lr", h.lr},
          {"beta1", h.beta1},
          {"beta2", h.beta2},
          {"eps", h.eps},
          {"weight_decay", h.weight_decay}};
}

// Every rank's shards of `instance` as the model plans them, [case param, start, end] in its
// groups' installed order: what the worker's grad-stats group stand-in simulates the other
// ranks from.
json shards_of_every_rank(const model::CaseSpec& spec, model::Instance instance) {
  const auto layouts = model::full_param_layout(spec);
  json out = json::array();
  for (int64_t r = 0; r < model::instance_dp(spec, instance); ++r) {
    json shards = json::array();
    for (const auto& group : model::plan_rank(spec, layouts, instance, r).groups) {
      for (const auto& e : group.installed) {
        shards.push_back({e.param, e.param_range.start, e.param_range.end});
      }
    }
    out.push_back(std::move(shards));
  }
  return out;
}


}  // namespace

// A checkpoint the worker holds; dropped there when the last copy of its handle goes.
struct RealCheckpoint {
  RealCheckpoint(MegatronWorker* w, int64_t i) : worker(w), id(i), generation(w->generation()) {}
  ~RealCheckpoint() {
    if (worker->generation() != generation) return;
    try {
      worker->request({{"op", "drop_checkpoint"}, {"checkpoint", id}});
    } catch (const std::exception&) {
      // Housekeeping: a worker that fails here fails the next request instead.
    }
  }
  MegatronWorker* worker;
  int64_t id;
  uint64_t generation;
};

namespace {

class MegatronRank final : public RankUnderTest {
 public:
  MegatronRank(MegatronWorker& worker, const model::CaseSpec& spec, model::Instance instance,
               int64_t rank, const ParamValues& initial, bool check_stream_order,
               bool training_loop)
      : worker_(&worker),
        spec_(spec),
        instance_(instance),
        initial_(initial),
        training_loop_(training_loop) {
    json values = json::array();
    for (const auto& v : initial) values.push_back(to_bits(v));
    json wd = json::array();
    for (int g = 0; g < spec.num_groups(); ++g) wd.push_back(group_weight_decay(g));
    handle_ = worker_->next_handle();
    json c = case_request(spec);
    if (training_loop) c["training"] = true;
    const json reply = worker_->request(
        {{"op", "build"},
         {"handle", handle_},
         {"instance", instance == model::Instance::kExpert ? "expert" : "dense"},
         {"rank", rank},
         {"case", std::move(c)},
         {"initial", std::move(values)},
         {"group_weight_decay", std::move(wd)},
         {"check_stream_order", check_stream_order}});
    generation_ = worker_->generation();
    obs_ = observation_of(reply, instance, rank);
  }
  ~MegatronRank() override {
    if (worker_->generation() != generation_) return;  // the worker that held it is gone
    try {
      worker_->request({{"op", "drop"}, {"handle", handle_}});
    } catch (const std::exception&) {
      // Dropping is housekeeping: a worker that fails here fails the next request instead.
    }
  }

  const RankObservation& construction() const override { return obs_; }
  const std::vector<std::vector<float>>& initial_values() const override { return initial_; }
  void step(const model::StepInputs& in) override {
    json grads = json::array(), hyper = json::array();
    for (const auto& g : in.grads) grads.push_back(to_bits(g));
    for (const auto& h : in.group_hyper) hyper.push_back(hyper_request(h));
    // The other DP ranks' found-inf flags, which the worker's grad-stats group stand-in
    // combines with this rank's own: every rank holds the same reduced grads.
    send({{"op", "step"},
          {"grads", std::move(grads)},
          {"hyper", std::move(hyper)},
          {"found_inf_elsewhere", model::grads_non_finite(spec_, instance_, in)},
          {"main_grads_from_backward", training_loop_}});
  }
  std::vector<ObservedGrad> backward(const std::vector<std::vector<float>>& grads) override {
    json g = json::array();
    for (const auto& v : grads) g.push_back(to_bits(v));
    observed_.reset();
    const json r = worker_->request({{"op", "backward"}, {"handle", handle_}, {"grads", g}});
    std::vector<ObservedGrad> out;
    for (const json& p : r.at("params")) {
      out.push_back(ObservedGrad{p.at("param").get<int>(), p.at("requires_grad").get<bool>(),
                                 p.at("is_leaf").get<bool>(), p.at("grad_is_none").get<bool>(),
                                 from_bits(p.at("main_grad"))});
    }
    return out;
  }
  void use_grad_scaler(const model::GradScalerConfig& c) override {
    send({{"op", "use_grad_scaler"},
          {"config",
           {{"dynamic", c.dynamic},
            {"initial_scale", c.initial_scale},
            {"min_scale", c.min_scale},
            {"growth_factor", c.growth_factor},
            {"backoff_factor", c.backoff_factor},
            {"growth_interval", c.growth_interval},
            {"hysteresis", c.hysteresis}}}});
  }
  std::optional<model::GradScalerState> grad_scaler_state() const override {
    const json r = worker_->request({{"op", "grad_scaler_state"}, {"handle", handle_}});
    if (!r.at("present").get<bool>()) return std::nullopt;
    model::GradScalerState out;
    out.scale = static_cast<float>(r.at("scale").get<double>());
    out.growth_tracker = r.at("growth_tracker").get<int64_t>();
    out.hysteresis_tracker = r.at("hysteresis_tracker").get<int64_t>();
    return out;
  }
  void use_grad_stats(double clip_grad, bool log_num_zeros_in_grad) override {
    send({{"op", "use_grad_stats"},
          {"clip_grad", clip_grad},
          {"log_num_zeros_in_grad", log_num_zeros_in_grad},
          {"shards", shards_of_every_rank(spec_, instance_)}});
  }
  StepReport last_step() const override {
    const json r = worker_->request({{"op", "last_step"}, {"handle", handle_}});
    StepReport out;
    out.success = r.at("success").get<bool>();
    // inf and nan come as text ("inf", "-inf", "nan"), which JSON numbers cannot hold.
    const json& norm = r.at("grad_norm");
    if (norm.is_string()) out.grad_norm = std::stod(norm.get<std::string>());
    if (norm.is_number()) out.grad_norm = norm.get<double>();
    if (!r.at("num_zeros_in_grad").is_null()) {
      out.num_zeros_in_grad = r.at("num_zeros_in_grad").get<int64_t>();
    }
    return out;
  }
  void set_model_values(const std::vector<std::vector<float>>& values) override {
    json v = json::array();
    for (const auto& p : values) v.push_back(to_bits(p));
    send({{"op", "set_model_values"}, {"values", std::move(v)}});
  }
  void zero_grad(bool set_to_none) override {
    send({{"op", "zero_grad"}, {"set_to_none", set_to_none}});
  }
  void reload_model_params() override { send({{"op", "reload_model_params"}}); }
  std::vector<float> model_piece(size_t g, size_t i) const override {
    return from_bits(entry(g, i).at("model_piece"));
  }
  std::vector<float> optimizer_piece(size_t g, size_t i) const override {
    return from_bits(entry(g, i).at("optimizer_piece"));
  }
  ObservedState state(size_t g, size_t i) const override {
    const json& s = entry(g, i).at("state");
    return ObservedState{from_bits(s.at("exp_avg")), from_bits(s.at("exp_avg_sq")),
                         from_bits(s.at("master")), s.at("step").get<int64_t>(),
                         s.at("present").get<bool>()};
  }
  ObservedPlacement placement(size_t g, size_t i) const override {
    const json& p = entry(g, i).at("placement");
    ObservedPlacement out;
    out.offloaded = p.at("offloaded");
    out.fp32_copy = p.at("fp32_copy");
    out.host_pinned = p.at("host_pinned");
    out.cpu_optimizer = p.at("cpu_optimizer");
    out.stepped_on_host = p.at("stepped_on_host");
    for (const auto& [k, v] : p.at("state_on_host").items()) {
      if (k != "step") out.state_on_host[k] = v.get<bool>();  // as the port reports it
    }
    return out;
  }
  int num_cpu_optimizers() const override { return observed().at("num_cpu_optimizers"); }
  bool has_accelerator_optimizer() const override {
    return observed().at("has_accelerator_optimizer");
  }
  std::vector<model::AdamWHyper> group_hyper_parameters() const override {
    std::vector<model::AdamWHyper> out;
    for (const json& h : observed().at("hyper")) out.push_back(hyper_of(h));
    return out;
  }
  uint64_t digest() const override { return state_digest(*this); }
  std::vector<std::vector<float>> model_values() const override {
    const json all = worker_->request({{"op", "observe"}, {"handle", handle_}});
    std::vector<std::vector<float>> out;
    for (const json& v : all.at("model_values")) out.push_back(from_bits(v));
    return out;
  }
  Checkpoint save() const override {
    auto ck = std::make_shared<RealCheckpoint>(worker_, worker_->next_handle());
    worker_->request({{"op", "save"}, {"handle", handle_}, {"checkpoint", ck->id}});
    return Checkpoint{nullptr, std::move(ck)};
  }
  void load(const Checkpoint& ck, bool map_to_host) override {
    require_held(ck, "load");
    send({{"op", "load"}, {"checkpoint", ck.real->id}, {"map_to_host", map_to_host}});
  }
  // The group's ranks write into one checkpoint of the worker, as into one directory.
  Checkpoint save_distributed(const Checkpoint* group_so_far) const override {
    if (group_so_far != nullptr) require_held(*group_so_far, "save_distributed");
    auto ck = group_so_far != nullptr
                  ? group_so_far->real
                  : std::make_shared<RealCheckpoint>(worker_, worker_->next_handle());
    worker_->request({{"op", "save_distributed"}, {"handle", handle_}, {"checkpoint", ck->id}});
    return Checkpoint{nullptr, std::move(ck)};
  }
  void load_distributed(const Checkpoint& ck) override {
    require_held(ck, "load_distributed");
    send({{"op", "load_distributed"}, {"checkpoint", ck.real->id}});
  }
  void load_gathered(const GatheredCheckpoint&) override { gathered_checkpoints_need_real_ranks(); }
  void add_non_tensor_state(std::vector<std::string> keys) override {
    send({{"op", "add_non_tensor_state"}, {"keys", std::move(keys)}});
  }
  std::vector<std::string> stream_races() const override {
    return worker_->request({{"op", "stream_races"}, {"handle", handle_}})
        .at("races")
        .get<std::vector<std::string>>();
  }
  std::vector<std::string> pageable_copies() const override {
    not_served_by_real_code(Capability::kPinnedCopyRecords);
  }

  Checkpoint save_dp_zero() const {
    auto ck = std::make_shared<RealCheckpoint>(worker_, worker_->next_handle());
    worker_->request({{"op", "save_dp_zero"}, {"handle", handle_}, {"checkpoint", ck->id}});
    return Checkpoint{nullptr, std::move(ck)};
  }
  void load_dp_zero(const Checkpoint& ck) {
    require_held(ck, "load_dp_zero");
    send({{"op", "load_dp_zero"}, {"checkpoint", ck.real->id}});
  }
  void save_sharded(const std::string& directory, const std::string& sharding_type) const {
    worker_->request({{"op", "save_sharded"},
                      {"handle", handle_},
                      {"directory", directory},
                      {"sharding_type", sharding_type}});
  }
  void load_sharded(const std::string& directory) {
    send({{"op", "load_sharded"}, {"directory", directory}});
  }

  MegatronStepTimes time_steps(int steps) {
    const json r = worker_->request({{"op", "time_steps"}, {"handle", handle_}, {"steps", steps}});
    observed_.reset();
    return {r.at("step_seconds").get<std::vector<double>>(),
            r.at("hdo_seconds").get<std::vector<double>>(),
            r.at("host_seconds").get<std::vector<double>>(), r.at("host_params").get<int64_t>(),
            r.at("host_optimizers").get<int64_t>()};
  }

 private:
  // A request about this rank; what was observed before is stale after it.
  void require_held(const Checkpoint& ck, const char* what) const {
    if (!ck.real || ck.real->worker != worker_ || ck.real->generation != worker_->generation()) {
      throw std::invalid_argument(std::string(what) + ": a checkpoint this worker does not hold");
    }
  }
  void send(json request) {
    observed_.reset();
    request["handle"] = handle_;
    worker_->request(std::move(request));
  }
  const json& observed() const {
    if (!observed_) {
      observed_ =
          worker_->request({{"op", "observe"}, {"handle", handle_}, {"model_values", false}});
    }
    return *observed_;
  }
  const json& entry(size_t g, size_t i) const { return observed().at("entries").at(g).at(i); }

  MegatronWorker* worker_;
  model::CaseSpec spec_;
  model::Instance instance_;
  int64_t handle_ = 0;
  uint64_t generation_ = 0;
  ParamValues initial_;
  bool training_loop_ = false;
  RankObservation obs_;
  mutable std::optional<json> observed_;
};

}  // namespace

json case_request(const model::CaseSpec& spec) {
  json params = json::array();
  for (const model::ParamSpec& p : spec.params) {
    params.push_back({{"name", p.name},
                      {"shape", p.shape},
                      {"dtype", model::dtype_name(p.dtype)},
                      {"is_expert", p.is_expert},
                      {"shared_embedding", p.shared_embedding},
                      {"group", p.group},
                      {"chunk", p.chunk}});
  }
  return {{"params", std::move(params)},
          {"dp", spec.dp},
          {"expert_dp", spec.expert_dp},
          {"bucket_size", spec.bucket_size ? json(*spec.bucket_size) : json(nullptr)},
          {"bucket_first_chunk_only", spec.bucket_first_chunk_only},
          {"pad_for_high_nccl_busbw", spec.pad_for_high_nccl_busbw},
          {"grad_reduce_in_fp32", spec.grad_reduce_in_fp32},
          {"precision_aware", spec.precision_aware},
          {"store_param_remainders", spec.store_param_remainders},
          {"cpu_offload", spec.cpu_offload},
          {"offload_fraction", spec.offload_fraction},
          {"overlap_cpu_optimizer_d2h_h2d", spec.overlap_cpu_optimizer_d2h_h2d},
          {"transformer_engine", spec.transformer_engine},
          {"buffers_from_parallel_state", spec.buffers_from_parallel_state}};
}

namespace {

MegatronRank& megatron_rank(RankUnderTest& rank) {
  auto* megatron = dynamic_cast<MegatronRank*>(&rank);
  if (megatron == nullptr) throw std::invalid_argument("not a rank of the megatron target");
  return *megatron;
}

}  // namespace

MegatronStepTimes time_megatron_steps(RankUnderTest& rank, int steps) {
  return megatron_rank(rank).time_steps(steps);
}

Checkpoint save_dp_zero(RankUnderTest& rank) { return megatron_rank(rank).save_dp_zero(); }

void load_dp_zero(RankUnderTest& rank, const Checkpoint& ck) {
  megatron_rank(rank).load_dp_zero(ck);
}

void save_sharded(RankUnderTest& rank, const std::string& directory,
                  const std::string& sharding_type) {
  megatron_rank(rank).save_sharded(directory, sharding_type);
}

void load_sharded(RankUnderTest& rank, const std::string& directory) {
  megatron_rank(rank).load_sharded(directory);
}

std::unique_ptr<RankUnderTest> make_megatron_rank(const MegatronTarget& target,
                                                  const model::CaseSpec& spec,
                                                  model::Instance instance, int64_t rank,
                                                  const ParamValues& initial,
                                                  bool check_stream_order,
                                                  bool training_loop) {
  return make_megatron_rank(MegatronWorker::of(target), spec, instance, rank, initial,
                            check_stream_order, training_loop);
}

std::unique_ptr<RankUnderTest> make_megatron_rank(MegatronWorker& worker,
                                                  const model::CaseSpec& spec,
                                                  model::Instance instance, int64_t rank,
                                                  const ParamValues& initial,
                                                  bool check_stream_order, bool training_loop) {
  if (const auto bad = check_initial_values(spec, initial)) throw std::invalid_argument(*bad);
  return std::make_unique<MegatronRank>(worker, spec, instance, rank, initial, check_stream_order,
                                        training_loop);
}

}  // namespace sc::rig
