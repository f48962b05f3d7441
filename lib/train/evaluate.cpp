// lpsgd eval: a model from a checkpoint or an ONNX file over a split, summed
// over the ranks (see evaluate.hpp).
#include "train/evaluate.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/loader.hpp"
#include "nn/builder.hpp"
#include "train/model_source.hpp"

namespace lpsgd::train {
namespace {

// What the graph outputs for one row of logits (ONNX Runtime's Softmax and
// LogSoftmax, in float).
void output_row(model::Output kind, const float* logits, size_t k, float* out) {
  if (kind == model::Output::Logits) {
    std::copy(logits, logits + k, out);
    return;
  }
  const float mx = *std::max_element(logits, logits + k);
  float sum = 0;
  for (size_t j = 0; j < k; ++j) sum += std::exp(logits[j] - mx);
  for (size_t j = 0; j < k; ++j)
    out[j] = kind == model::Output::Softmax ? std::exp(logits[j] - mx) / sum
                                            : logits[j] - mx - std::log(sum);
}

// Rank 0 runs f; every rank then throws what it threw (or none does).
template <class F>
void on_rank0(int rank, F&& f) {
  int kind = 0;  // 0 ok, 1 usage, 2 runtime
  std::string msg;
  if (rank == 0) {
    try {
      f();
    } catch (const Error& e) {
      kind = e.kind() == ErrorKind::Usage ? 1 : 2;
      msg = e.kind() == ErrorKind::Usage ? e.message() : e.where();
    }
  }
  int len = static_cast<int>(msg.size());
  int head[2] = {kind, len};
  MPI_CHECK(MPI_Bcast(head, 2, MPI_INT, 0, MPI_COMM_WORLD));
  if (head[0] == 0) return;
  msg.resize(static_cast<size_t>(head[1]));
  MPI_CHECK(MPI_Bcast(msg.data(), head[1], MPI_CHAR, 0, MPI_COMM_WORLD));
  if (head[0] == 1) LPSGD_USAGE_ERROR(msg);
  LPSGD_THROW(msg);
}

void write_outputs(const std::string& path, const std::vector<float>& scores,
                   const std::vector<int32_t>& labels, int64_t n, int64_t k) {
  const std::string tmp = temp_path_for(path);
  try {
    {
      io::h5::File f = io::h5::File::create(tmp);
      io::h5::Dataset::create_contiguous(f, "scores", io::h5::Type::F32,
                                     {static_cast<hsize_t>(n), static_cast<hsize_t>(k)})
          .write_all(io::h5::Type::F32, scores.data());
      io::h5::Dataset::create_contiguous(f, "labels", io::h5::Type::Int, {static_cast<hsize_t>(n)})
          .write_all(io::h5::Type::Int, labels.data());
      f.flush();
    }
    commit_file(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace

EvalResult evaluate_model(Device& dev, const EvalConfig& cfg) {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  if (cfg.data.empty()) LPSGD_USAGE_ERROR("--data is required (the dataset to evaluate on)");
  if (cfg.model.empty()) LPSGD_USAGE_ERROR("name a checkpoint (.h5) or an ONNX model (.onnx)");
  if (cfg.batch < 1 || cfg.batch > (int64_t{1} << 24))
    LPSGD_USAGE_ERROR("--batch must be in [1, 16777216], got " << cfg.batch);
  if (cfg.split != "train" && cfg.split != "test")
    LPSGD_USAGE_ERROR("--split must be train or test, got '" << cfg.split << "'");

  io::LoaderOptions lo;
  lo.path = cfg.data;
  lo.split = cfg.split;
  lo.batch = cfg.batch;
  lo.rank = rank;
  lo.world = world;
  lo.cache_mb = cfg.cache_mb;
  lo.shuffle = false;
  lo.prefetch = 1;
  lo.coverage = io::Coverage::All;
  io::Loader loader(lo);
  const io::SplitShape& sh = loader.shape();
  DataSpec data;
  data.path = cfg.data;
  data.sample = {sh.c, sh.h, sh.w};
  data.type = sh.type;
  data.scale = loader.input_scale();
  data.shift = loader.input_shift();
  data.classes = loader.num_classes();

  model::ModelDesc desc;
  std::string source = cfg.model;
  if (model::is_model_file(cfg.model)) {
    desc = load_model(cfg.model, data);
    if (!desc.has_params())
      LPSGD_USAGE_ERROR(cfg.model << ": the graph has no initializers for its layers' weights: "
                                  << "nothing to evaluate");
  } else {
    desc = checkpoint_model(read_checkpoint_or_dir(cfg.model, &source), &data);
  }
  auto m = nn::build_model(dev, desc, nn::shape_of(desc.input_shape), 1, /*given_params=*/true);
  m->prepare(cfg.batch, nn::Mode::Eval);

  const auto k = static_cast<size_t>(data.classes);
  const size_t sample = static_cast<size_t>(sh.sample_elems());
  DeviceBuffer x(dev, static_cast<size_t>(cfg.batch) * sample * sizeof(float));
  DeviceBuffer y(dev, static_cast<size_t>(cfg.batch) * sizeof(int32_t));
  std::vector<float> logits;
  std::vector<double> sums(3 * k + 2, 0.0);  // per class: samples, correct, loss; then loss, count
  std::vector<int64_t> index;                // --outputs: this rank's samples and rows
  std::vector<float> rows;
  std::vector<int32_t> labels;
  io::Batch b;
  while (loader.next(b)) {
    if (b.size == 0) continue;
    dev.copy_from_host(x.data(), b.x.data(), static_cast<size_t>(b.size) * sample * sizeof(float));
    dev.copy_from_host(y.data(), b.y.data(), static_cast<size_t>(b.size) * sizeof(int32_t));
    const nn::Tensor xt(dev, x.as<float>(), m->input_shape().with_batch(b.size));
    const nn::LossStats s = m->evaluate(xt, y.as<int32_t>());
    sums[3 * k] += s.loss_sum;
    sums[3 * k + 1] += static_cast<double>(s.count);
    logits.resize(static_cast<size_t>(b.size) * k);
    dev.copy_to_host(logits.data(), m->logits().data(), logits.size() * sizeof(float));
    for (int64_t r = 0; r < b.size; ++r) {
      const float* row = logits.data() + static_cast<size_t>(r) * k;
      const auto label = static_cast<size_t>(b.y[static_cast<size_t>(r)]);
      const size_t best = static_cast<size_t>(std::max_element(row, row + k) - row);  // first max
      const float mx = row[best];
      double sum = 0;
      for (size_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
      sums[label] += 1;
      sums[k + label] += best == label ? 1 : 0;
      sums[2 * k + label] += std::log(sum) - static_cast<double>(row[label] - mx);
      if (!cfg.outputs.empty()) {
        index.push_back(b.index[static_cast<size_t>(r)]);
        labels.push_back(b.y[static_cast<size_t>(r)]);
        rows.resize(rows.size() + k);
        output_row(desc.output, row, k, rows.data() + rows.size() - k);
      }
    }
  }
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE,
                          MPI_SUM, MPI_COMM_WORLD));
  EvalResult res;
  res.model = desc.spec;
  res.source = source;
  res.samples = static_cast<int64_t>(sums[3 * k + 1]);
  int64_t correct = 0;
  for (size_t c = 0; c < k; ++c) {
    res.per_class_samples.push_back(static_cast<int64_t>(sums[c]));
    res.per_class_correct.push_back(static_cast<int64_t>(sums[k + c]));
    res.per_class_loss.push_back(sums[2 * k + c]);
    correct += res.per_class_correct.back();
  }
  if (res.samples > 0) {
    res.loss = sums[3 * k] / static_cast<double>(res.samples);
    res.accuracy = static_cast<double>(correct) / static_cast<double>(res.samples);
  }

  if (!cfg.outputs.empty()) {
    // Every rank's rows to rank 0, which puts them in the split's order.
    const int mine = static_cast<int>(index.size());
    std::vector<int> counts(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
    MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
    const int64_t n = res.samples;
    std::vector<int64_t> all_index(rank == 0 ? static_cast<size_t>(n) : 0);
    std::vector<int32_t> all_labels(all_index.size());
    std::vector<float> all_rows(all_index.size() * k);
    int at = 0;
    for (int r = 0; r < world; ++r) {
      displs[static_cast<size_t>(r)] = at;
      at += counts[static_cast<size_t>(r)];
    }
    MPI_CHECK(MPI_Gatherv(index.data(), mine, MPI_INT64_T, all_index.data(), counts.data(),
                          displs.data(), MPI_INT64_T, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Gatherv(labels.data(), mine, MPI_INT32_T, all_labels.data(), counts.data(),
                          displs.data(), MPI_INT32_T, 0, MPI_COMM_WORLD));
    // Rows as k floats each: one derived type keeps the counts in samples.
    MPI_Datatype row_type;
    MPI_CHECK(MPI_Type_contiguous(static_cast<int>(k), MPI_FLOAT, &row_type));
    MPI_CHECK(MPI_Type_commit(&row_type));
    MPI_CHECK(MPI_Gatherv(rows.data(), mine, row_type, all_rows.data(), counts.data(),
                          displs.data(), row_type, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Type_free(&row_type));
    on_rank0(rank, [&] {
      std::vector<float> scores(static_cast<size_t>(n) * k);
      std::vector<int32_t> ordered(static_cast<size_t>(n));
      for (size_t i = 0; i < all_index.size(); ++i) {
        const auto at_row = static_cast<size_t>(all_index[i]);
        LPSGD_CHECK(at_row < ordered.size(), "sample index " << at_row << " out of range");
        ordered[at_row] = all_labels[i];
        std::memcpy(scores.data() + at_row * k, all_rows.data() + i * k, k * sizeof(float));
      }
      write_outputs(cfg.outputs, scores, ordered, n, static_cast<int64_t>(k));
    });
  }
  return res;
}

}  // namespace lpsgd::train
