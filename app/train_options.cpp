// The options of `lpsgd train` and their conversion to a TrainConfig (see
// train_options.hpp).
#include "app/train_options.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "comm/types.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "io/augment.hpp"

namespace lpsgd::app {
namespace {

// One option's value as INI text (the types used below).
std::string value_text(const boost::any& v) {
  std::ostringstream os;
  if (auto* s = boost::any_cast<std::string>(&v)) os << *s;
  else if (auto* i = boost::any_cast<int>(&v)) os << *i;
  else if (auto* l = boost::any_cast<int64_t>(&v)) os << *l;
  else if (auto* u = boost::any_cast<uint64_t>(&v)) os << *u;
  else if (auto* d = boost::any_cast<double>(&v)) os << cli::shortest(*d);
  else if (auto* f = boost::any_cast<float>(&v)) os << cli::shortest(*f);
  else if (auto* b = boost::any_cast<bool>(&v)) os << (*b ? "true" : "false");
  else os << "?";
  return os.str();
}

// The effective configuration as INI lines (what a checkpoint records).
std::string config_text(const cli::po::options_description& desc, const cli::po::variables_map& vm) {
  std::ostringstream os;
  for (const auto& opt : desc.options()) {
    const std::string& name = opt->long_name();
    if (name == "help" || name == "config" || !vm.count(name)) continue;
    os << name << " = " << value_text(vm[name].value()) << "\n";
  }
  return os.str();
}

// --optimizer and its hyper-parameters into c; a bad value is a usage error
// (the trainer checks the ranges again, for configs made in code). Options of
// another optimizer than the one chosen are ignored (a config may carry them
// all), except --nesterov, which only SGD can honour.
void parse_optimizer_options(const std::string& name, double momentum, bool nesterov,
                             double weight_decay, const std::string& betas, double eps, double eta,
                             train::OptimizerConfig& c) {
  c.kind = train::parse_optimizer(name);
  if (nesterov && c.kind != train::OptimizerKind::Sgd)
    LPSGD_USAGE_ERROR("--nesterov is for --optimizer sgd, not " << name);
  c.sgd.momentum = static_cast<float>(momentum);
  c.sgd.nesterov = nesterov;
  c.sgd.weight_decay = static_cast<float>(weight_decay);
  c.lars.momentum = static_cast<float>(momentum);
  c.lars.weight_decay = static_cast<float>(weight_decay);
  c.lars.eta = static_cast<float>(eta);
  c.adamw.weight_decay = weight_decay;
  c.adamw.eps = eps;
  // "B1,B2": two numbers, nothing else.
  const size_t comma = betas.find(',');
  const std::string parts[2] = {betas.substr(0, comma),
                                comma == std::string::npos ? "" : betas.substr(comma + 1)};
  double b[2] = {0, 0};
  bool ok = true;
  for (size_t i = 0; ok && i < 2; ++i) {
    const char* s = parts[i].c_str();
    char* end = nullptr;
    b[i] = std::strtod(s, &end);
    ok = end != s && *end == '\0' && parts[i].find_first_of(" \t") == std::string::npos;
  }
  if (!ok) LPSGD_USAGE_ERROR("--adam-betas must be B1,B2 (two numbers in [0, 1)), got '" << betas << "'");
  c.adamw.beta1 = b[0];
  c.adamw.beta2 = b[1];
  // The chosen optimizer's values first, then the others': a bad value is a
  // mistake whichever optimizer it is for.
  train::check_optimizer_config(c);
  for (train::OptimizerKind k : {train::OptimizerKind::Sgd, train::OptimizerKind::AdamW,
                                 train::OptimizerKind::Lars}) {
    train::OptimizerConfig other = c;
    other.kind = k;
    train::check_optimizer_config(other);
  }
}

}  // namespace

bool parse_train_options(int argc, char** argv, TrainOptions& out) {
  namespace po = cli::po;
  train::TrainConfig& c = out.config;
  std::string schedule = "constant", sync = "allreduce", algo = "auto", block = "auto", auto_check = "on",
              overlap = "on", device = "cpu", links = "auto", progress = "auto",
              checkpoint_failure = "warn", init = "file", precision = "fp32", wire = "fp32",
              optimizer = "sgd", adam_betas = "0.9,0.999";
  double clip = 0;
  double bucket_mb = 1, lr = 0.05, momentum = 0.9, weight_decay = 0, lr_gamma = 0.1, min_lr = 0,
         adam_eps = 1e-8, lars_eta = 0.001;
  bool nesterov = false;
  int threads = 1;
  int64_t lr_step_every = 0;
  po::options_description desc("lpsgd train options");
  desc.add_options()
    ("data", po::value(&c.data), "HDF5 dataset (lpsgd data import-idx / synth make one)")
    ("model", po::value(&c.model)->default_value(c.model), "mlp:784-512-256-10, cnn:lenet, cnn:alexnet, cnn:resnet20 (also 32, 44, 56, 110), cnn:resnet18, cnn:resnet34, layers:... (as lpsgd ckpt info shows a checkpoint's) or FILE.onnx (an ONNX graph; see README, Your own model)")
    ("init", po::value(&init)->default_value(init), "initial parameters of a model from a file: file (its own tensors, e.g. the ONNX initializers) or fresh (drawn from --seed, as for a spec)")
    ("epochs", po::value(&c.epochs)->default_value(c.epochs), "epochs to train")
    ("max-steps", po::value(&c.max_steps)->default_value(0), "stop after this many steps (0: no limit)")
    ("batch", po::value(&c.batch)->default_value(c.batch), "samples per rank per step (per micro-batch with --accumulate; the largest micro-batch with --global-batch)")
    ("accumulate", po::value(&c.accumulate)->default_value(c.accumulate), "micro-batches of --batch per step, their gradients summed before one exchange")
    ("global-batch", po::value(&c.global_batch)->default_value(0), "samples per step over all ranks, kept whatever the number of ranks: micro-batches of at most --batch, as many as it takes (0: --batch x ranks x --accumulate)")
    ("clip-grad-norm", cli::value_with_default(&clip), "scale the averaged gradient to at most this L2 norm over the whole model before the update (0: off)")
    ("eval-batch", po::value(&c.eval_batch)->default_value(c.eval_batch), "samples per rank per evaluation batch")
    ("lr", cli::value_with_default(&lr), "base learning rate")
    ("optimizer", po::value(&optimizer)->default_value(optimizer), "sgd (momentum SGD), adamw (as torch.optim.AdamW) or lars (layer-wise trust ratio over momentum SGD; see README, Training)")
    ("momentum", cli::value_with_default(&momentum), "SGD and LARS momentum in [0, 1) (adamw: --adam-betas)")
    ("nesterov", po::bool_switch(&nesterov), "Nesterov momentum (sgd)")
    ("weight-decay", cli::value_with_default(&weight_decay), "weight decay: sgd L2 on every parameter, adamw decoupled on every parameter, lars L2 on weights (not biases or batch norm)")
    ("adam-betas", po::value(&adam_betas)->default_value(adam_betas)->value_name("B1,B2"), "adamw: decay of the first and second moment, each in [0, 1)")
    ("adam-eps", cli::value_with_default(&adam_eps), "adamw: added to the corrected second moment's square root, > 0")
    ("lars-eta", cli::value_with_default(&lars_eta), "lars: trust coefficient eta, > 0")
    ("schedule", po::value(&schedule)->default_value(schedule), "constant, step or cosine")
    ("warmup-steps", po::value(&c.schedule.warmup_steps)->default_value(0), "linear LR warmup steps")
    ("lr-step-every", po::value(&lr_step_every)->default_value(0), "step schedule: decay every N steps")
    ("lr-gamma", cli::value_with_default(&lr_gamma), "step schedule: decay factor")
    ("min-lr", cli::value_with_default(&min_lr), "cosine schedule: final learning rate")
    ("seed", po::value(&c.seed)->default_value(c.seed), "seed of the initial parameters and the data order")
    ("precision", po::value(&precision)->default_value(precision), "what Conv2d and Linear multiply in: fp32, or bf16 (with fp32 sums, master weights, loss and optimizer; where the CPU has AVX512_BF16 or AMX, else refused)")
    ("sync", po::value(&sync)->default_value(sync), "allreduce or reduce-bcast (gradients to rank 0, parameters back)")
    ("algo", po::value(&algo)->default_value(algo), "collective algorithm: auto (per bucket by the cost model of this cluster's links, measured on first use; a resume keeps the checkpoint's choices), lp, tree, mst, be, ring or mpi")
    ("block", po::value(&block)->default_value(block), "LP block size in bytes (K/M suffixes) or auto")
    ("bucket-mb", cli::value_with_default(&bucket_mb), "gradient buckets: whole layers packed up to this many MiB (0: one bucket)")
    ("overlap", po::value(&overlap)->default_value(overlap), "on: exchange buckets during backward, and let the next forward start while the last ones travel; backward: during backward only; off: after it")
    ("sync-bn", po::bool_switch(&c.sync_bn), "batch norm normalizes with the statistics of the global batch (a small allreduce per BatchNorm layer in forward and in backward) rather than each rank's own")
    ("wire", po::value(&wire)->default_value(wire), "what gradients travel as: fp32, bf16 or fp16 (sums in float, rounded once per addition; weights and optimizer stay fp32)")
    ("window", po::value(&c.window)->default_value(c.window), "LP blocks in flight per link")
    ("links", po::value(&links)->default_value(links), "auto (peer links in a node) or mpi")
    ("ranks-per-node", po::value(&c.ranks_per_node)->default_value(0), "split ranks into pretend nodes of N")
    ("calibration", po::value(&c.calibration), "the cost model's calibration file (lpsgd bench --calibrate writes one; default: this cluster's own in ~/.cache/lpsgd, measured on first use)")
    ("auto-check", po::value(&auto_check)->default_value(auto_check), "on: --algo auto checks its choices on the run's first steps and tries a bucket's runner-up where the measured time is off the model; off: the model's choices alone; always: every bucket tries its runner-up")
    ("comm-timeout", cli::value_with_default(&c.comm_timeout_s), "seconds without progress = error")
    ("eval-every", po::value(&c.eval_every)->default_value(-1), "evaluate every N steps (-1: every epoch, 0: only at the end)")
    ("metrics", po::value(&c.metrics), "append JSON lines (one per evaluation, one final) to FILE")
    ("step-trace", po::value(&c.step_trace), "write one line of timings per step to PREFIX.rank<R>.tsv (see jobs/plot/steps.py)")
    ("trace", po::value(&c.timeline)->value_name("FILE"), "write a timeline of the run, every rank on one clock, as Chrome trace-event JSON (open in Perfetto or chrome://tracing)")
    ("progress", po::value(&progress)->default_value(progress), "auto, bar (redrawn line), lines or off")
    ("progress-every", cli::value_with_default(&c.progress_every_s), "seconds between progress lines when stdout is not a terminal (0: none)")
    ("checkpoint-dir", po::value(&c.checkpoint_dir), "write checkpoints (*.h5) here; one is always written at the end")
    ("checkpoint-every", po::value(&c.checkpoint_every)->default_value(0), "checkpoint every N steps (0: only at the end and on signals)")
    ("checkpoint-every-minutes", cli::value_with_default(&c.checkpoint_every_minutes), "checkpoint every M minutes of wall time")
    ("keep", po::value(&c.keep)->default_value(c.keep), "checkpoints kept in --checkpoint-dir")
    ("checkpoint-failure", po::value(&checkpoint_failure)->default_value(checkpoint_failure), "a periodic checkpoint that cannot be written (full disk, unwritable directory): warn (one line; training goes on, the next is tried again) or abort (the run fails); the final and a signal's checkpoint always abort")
    ("resume", po::value(&c.resume)->default_value(c.resume), "auto (newest valid checkpoint in --checkpoint-dir, else fresh), none, or a checkpoint file")
    ("device", po::value(&device)->default_value(device), "cpu or cuda")
    ("threads", po::value(&threads)->default_value(threads), "compute threads per rank (OpenBLAS and oneDNN)")
    ("cache-mb", cli::value_with_default(&c.cache_mb), "hold the dataset in memory up to this size")
    ("prefetch", po::value(&c.prefetch)->default_value(c.prefetch), "batches prepared ahead by the loader thread")
    ("augment", po::value(&c.augment)->value_name("SPEC"), "augment training batches (never evaluation): crop:PAD (zero-pad PAD pixels each side, crop back at a random offset; the padding is a stored 0), flip (mirror left-right with probability 1/2), or crop:PAD,flip; each sample's draw depends on (seed, epoch, sample) only");
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd train --data F.h5 [--model SPEC] [options] (or --config FILE)"))
    return false;

  c.schedule.kind = train::parse_schedule_kind(schedule);
  c.schedule.base_lr = lr;
  c.schedule.step_every = lr_step_every;
  c.schedule.gamma = lr_gamma;
  c.schedule.min_lr = min_lr;
  parse_optimizer_options(optimizer, momentum, nesterov, weight_decay, adam_betas, adam_eps, lars_eta,
                          c.optimizer);
  c.sync.mode = train::parse_sync_mode(sync);
  c.sync.algo = comm::parse_algo(algo);
  c.auto_check = train::parse_auto_check(auto_check);
  c.sync.block_bytes = block == "auto" ? 0 : cli::parse_bytes(block);
  // Bounded (1 TiB) so the conversion to bytes below is defined; NaN fails too.
  if (!(bucket_mb >= 0 && bucket_mb <= 1 << 20))
    LPSGD_USAGE_ERROR("--bucket-mb must be in [0, 1048576], got " << bucket_mb);
  c.sync.bucket_bytes = static_cast<size_t>(bucket_mb * 1024 * 1024);
  if (overlap != "on" && overlap != "backward" && overlap != "off")
    LPSGD_USAGE_ERROR("--overlap must be on, backward or off, got '" << overlap << "'");
  c.sync.overlap = overlap != "off";
  c.sync.defer = overlap == "on";
  c.sync.wire = train::parse_wire(wire);
  if (!(clip >= 0) || !std::isfinite(clip))
    LPSGD_USAGE_ERROR("--clip-grad-norm must be a number >= 0 (0: off), got " << clip);
  c.sync.clip_norm = clip;
  c.links = comm::parse_links(links);
  c.progress = train::parse_progress_mode(progress);
  cli::require_range("window", c.window, 1, 16);
  cli::require_range("threads", threads, 1, 1024);
  cli::require_range("prefetch", c.prefetch, 0, 64);
  io::parse_augment(c.augment);  // a bad spec is a usage error now; the data's shape is checked by the loader
  if (checkpoint_failure != "warn" && checkpoint_failure != "abort")
    LPSGD_USAGE_ERROR("--checkpoint-failure must be warn or abort, got '" << checkpoint_failure << "'");
  c.checkpoint_failure_abort = checkpoint_failure == "abort";
  if (init != "file" && init != "fresh")
    LPSGD_USAGE_ERROR("--init must be file or fresh, got '" << init << "'");
  c.init_fresh = init == "fresh";
  if (device != "cpu" && device != "cuda")
    LPSGD_USAGE_ERROR("--device must be cpu or cuda, got '" << device << "'");
  c.precision = parse_precision(precision);
  c.config_text = config_text(desc, vm);

  out.threads = threads;
  out.device = device;
  return true;
}

}  // namespace lpsgd::app
