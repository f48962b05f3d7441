// Checkpoint tensors of a model (see model_tensors.hpp).
#include "train/model_tensors.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/desc.hpp"

namespace lpsgd::train {
namespace {

const nn::Param& slot_param(const nn::Model& m, const nn::ParamSlot& s, bool state) {
  const nn::Layer& l = m.layer(s.layer);
  return state ? l.state()[s.param] : l.params()[s.param];
}

std::vector<int64_t> dims(const nn::Shape& shape) {
  std::vector<int64_t> d;
  for (int i = 0; i < shape.rank(); ++i) d.push_back(shape[i]);
  return d;
}

void put(const nn::Model& m, const std::vector<nn::ParamSlot>& slots, bool state, const float* from,
         const std::string& suffix, std::vector<io::CkptTensor>& out) {
  for (const nn::ParamSlot& s : slots) {
    const float* x = from + s.offset;
    out.push_back({tensor_name(m, s, state) + suffix, dims(slot_param(m, s, state).shape),
                   std::vector<float>(x, x + s.count)});
  }
}

// Checks tensors[first, first + slots) against the slots and copies them to `to`.
void take(const nn::Model& m, const std::vector<nn::ParamSlot>& slots, bool state,
          const std::vector<io::CkptTensor>& tensors, size_t first, const std::string& suffix,
          float* to) {
  for (size_t i = 0; i < slots.size(); ++i) {
    const nn::Param& p = slot_param(m, slots[i], state);
    const io::CkptTensor& t = tensors[first + i];
    const std::string want = tensor_name(m, slots[i], state) + suffix;
    if (t.name != want || t.shape != dims(p.shape) || t.data.size() != slots[i].count)
      LPSGD_USAGE_ERROR("checkpoint tensor " << first + i << " is '" << t.name << "' "
                                             << model::shape_str(t.shape) << ", the model expects '" << want
                                             << "' " << p.shape.str());
    std::copy(t.data.begin(), t.data.end(), to + slots[i].offset);
  }
}

}  // namespace

std::string tensor_name(const nn::Model& m, const nn::ParamSlot& s, bool state) {
  return "layers." + std::to_string(s.layer) + "." + slot_param(m, s, state).name;
}

void put_tensors(const nn::Model& m, const std::vector<std::string>& suffixes, const ArenaCopies& h,
                 io::Checkpoint& c) {
  put(m, m.slots(), false, h.params.data(), "", c.params);
  for (size_t k = 0; k < suffixes.size(); ++k)
    put(m, m.slots(), false, h.optimizer.data() + k * m.param_count(), "." + suffixes[k], c.optimizer);
  put(m, m.state_slots(), true, h.state.data(), "", c.state);
}

void take_tensors(const nn::Model& m, const std::vector<std::string>& suffixes,
                  const io::Checkpoint& c, ArenaCopies& h) {
  const size_t n = m.slots().size(), ns = m.state_slots().size();
  if (c.params.size() != n || c.optimizer.size() != n * suffixes.size() || c.state.size() != ns)
    LPSGD_USAGE_ERROR("checkpoint holds " << c.params.size() << " parameter, " << c.optimizer.size()
                                          << " optimizer and " << c.state.size()
                                          << " state tensors; the model has " << n << ", "
                                          << n * suffixes.size() << " and " << ns);
  h.params.resize(m.param_count());
  h.optimizer.resize(suffixes.size() * m.param_count());
  h.state.resize(m.state_count());
  take(m, m.slots(), false, c.params, 0, "", h.params.data());
  for (size_t k = 0; k < suffixes.size(); ++k)
    take(m, m.slots(), false, c.optimizer, k * n, "." + suffixes[k], h.optimizer.data() + k * m.param_count());
  take(m, m.state_slots(), true, c.state, 0, "", h.state.data());
}

}  // namespace lpsgd::train
