// Training checkpoints: one HDF5 file per checkpoint, written atomically,
// read back only after every part of it has been checked.
//
// Directory (written by one rank):
//   DIR/ckpt-000000120.h5   one file per checkpoint, step zero-padded to 9 digits
//   DIR/latest              one line: the file name of the newest checkpoint
//   DIR/.ckpt-....h5.tmp.PID  a checkpoint being written (ignored by readers)
// A checkpoint is written to its temporary name, flushed, closed, fsync'd and
// renamed; then `latest` is replaced the same way; then checkpoints beyond the
// newest `keep` (by step) and temporaries left by earlier, killed writers are
// removed. A crash at any point leaves every complete checkpoint intact.
//
// File layout (HDF5 1.8+ object format, so the superblock and object headers,
// and with them every attribute, carry HDF5's own metadata checksums):
//   /            attributes: format = "lpsgd-checkpoint", format_version = 1,
//                the CkptMeta fields under their own names (int64: step, epoch,
//                ranks, batch; uint64: samples, loader_epoch, loader_cursor,
//                seed, rng_counter; double: lr, wall_time; string: model,
//                config, version) and checksum (uint64). Strings are
//                fixed-length (h5py returns bytes), so they sit inside the
//                checksummed metadata rather than in HDF5's global heap.
//                Optional (written since ONNX export, issue 34; absent in
//                older checkpoints): input_shape (double[], the per-sample
//                shape of the data), input_type ("uint8" or "float32"),
//                input_scale and input_shift (double[] per channel: what the
//                loader applied), which `lpsgd export` needs; precision
//                ("fp32" or "bf16": what the layers multiplied in, issue 33);
//                wire ("fp32", "bf16" or "fp16": what the gradients
//                travelled as, issue 33); algos (the algorithm of each
//                gradient bucket's collective, comma-separated in bucket
//                order, e.g. "ring,ring,lp": a resume with --algo auto keeps
//                them, so it adds in the same order; absent for one rank);
//                auto_check (where auto's check on the run's own steps stood,
//                train/auto_check.hpp; absent where it was off: issue 50);
//                optimizer (--optimizer: "sgd", "adamw", "lars"; absent
//                before issue 46: "sgd") and optimizer_steps (int64: the
//                optimizer steps taken, AdamW's t; absent before issue 46:
//                step); accumulate (int64: micro-batches per step, where
//                more than one; with ranks and batch it gives the global
//                batch a resume keeps).
//   /params      attribute count (int64); one dataset per tensor, in order,
//                named "00000_NAME" (index zero-padded to 5 digits, '/' in NAME
//                replaced by '_'), float32, contiguous, shaped like the tensor
//                (a scalar dataspace for shape []), with attribute name = the
//                exact tensor name
//   /optimizer   the same for the optimizer state: each state array's
//                tensors in parameter order, named "NAME.SUFFIX": sgd and
//                lars "NAME.momentum"; adamw every "NAME.exp_avg", then every
//                "NAME.exp_avg_sq"
//   /state       the same for layer state that is not learned (batch norm's
//                running statistics); only where the model has some
//
// Checksum: checkpoint_checksum() chains checksum64 (XXH64) over, for
// "params", "optimizer" and (where present) "state": the group name and
// tensor count, then per tensor
// its name, rank, dims and element count (as little-endian 64-bit words) and
// its float32 data. It covers the tensors only, not the metadata, so two runs
// that reach the same parameters have the same checksum whatever their wall
// time, P or config; HDF5's metadata checksums guard the attributes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lpsgd::io {

/// One named, shaped float32 tensor; data.size() == product of shape (1 for []).
struct CkptTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct CkptMeta {
  int64_t step = 0;          ///< optimizer updates done
  int64_t epoch = 0;         ///< epoch the next step belongs to
  uint64_t samples = 0;      ///< training samples consumed (global)
  uint64_t loader_epoch = 0, loader_cursor = 0;  ///< io::LoaderState
  double lr = 0;             ///< lr of the last step (informational; the schedule is a function of step)
  uint64_t seed = 0;         ///< run seed; RNG state = (seed, rng_counter)
  uint64_t rng_counter = 0;  ///< Philox counter position for dropout etc.
  int ranks = 0;             ///< P it was written at
  int64_t batch = 0;         ///< per-rank batch at write time
  std::string model;         ///< model spec, e.g. "mlp:784-512-256-10", or the layer list
                             ///< (model::ModelDesc::canonical()) of a model from a file
  std::string config;        ///< full config as INI text (key = value lines)
  std::string version;       ///< lpsgd version (lpsgd/config.hpp)
  double wall_time = 0;      ///< unix time written
  /// The data the model was trained on, as export needs it; empty when the
  /// checkpoint predates them (optional attributes).
  std::vector<int64_t> input_shape;     ///< per sample, [C, H, W]
  std::string input_type;               ///< "uint8" or "float32"
  std::vector<double> input_scale, input_shift;  ///< per channel (io::Loader)
  /// --precision of the run ("fp32", "bf16"). Optional attribute: reading a
  /// checkpoint that predates it gives "fp32" (its runs were); "" is not
  /// written.
  std::string precision;
  /// What the gradients travelled as (--wire): "fp32", "bf16" or "fp16".
  /// Optional attribute, read as "fp32" where absent, as precision.
  std::string wire;
  /// The algorithm of each gradient bucket, comma-separated ("lp,lp,tree");
  /// empty for one rank or when the checkpoint predates it.
  std::string algos;
  /// Where --algo auto's check on the run's own steps stood
  /// (train/auto_check.hpp: "done", "measure:B", "trial:..."); empty where
  /// it was off or the checkpoint predates it.
  std::string auto_check;
  /// --optimizer of the run ("sgd", "adamw", "lars": lowercase letters and
  /// digits), which names the optimizer tensors. Optional attribute, read as
  /// "sgd" where absent (the only optimizer before it); "" is not written.
  std::string optimizer;
  /// Optimizer steps taken (AdamW's bias correction counts them; equal to
  /// step in lpsgd's runs so far, kept apart so that a run that takes a step
  /// without an update, or several per step, can still resume exactly).
  /// Optional attribute, read as step where absent.
  int64_t optimizer_steps = 0;
  /// Micro-batches per step (gradient accumulation): the global batch is
  /// ranks x batch x accumulate. Optional attribute, 1 where absent.
  int64_t accumulate = 1;
};

struct Checkpoint {
  CkptMeta meta;
  std::vector<CkptTensor> params;
  std::vector<CkptTensor> optimizer;
  /// Layer state that is not learned ("layers.I.running_mean", ...); empty
  /// for models without any.
  std::vector<CkptTensor> state;
  uint64_t checksum = 0;  ///< checkpoint_checksum(); set by write and read
};

/// Format name and version written to and required in every checkpoint.
inline constexpr const char* kCheckpointFormat = "lpsgd-checkpoint";
inline constexpr int64_t kCheckpointFormatVersion = 1;

/// "ckpt-000000120.h5" for step 120 (at least 9 digits).
std::string checkpoint_file_name(int64_t step);

/// The checksum of c's tensors (see the header comment); throws a runtime
/// error when a tensor's data size does not match its shape.
uint64_t checkpoint_checksum(const Checkpoint& c);

/// Writes c as DIR/ckpt-<step>.h5 (see the header comment for the sequence),
/// creating DIR if missing; sets c.checksum; keeps the newest `keep` (>= 1)
/// checkpoints, never removing the one just written. Returns its path.
/// keep < 1 is a usage error. Any failure (DIR cannot be created, a full
/// disk, an unwritable directory) is a runtime error "checkpoint at step S not
/// written: REASON", REASON being the errno's text ("No space left on device")
/// where the system gave one (Error::sys_errno() holds it); no temporary is
/// left and DIR's existing checkpoints and `latest` are untouched.
std::string write_checkpoint(const std::string& dir, Checkpoint& c, int keep);

/// Reads and validates the checkpoint at `path`: format name and version,
/// every attribute present and typed, tensor counts, names, float32 data of
/// the right size, and the checksum recomputed. A missing file is a usage
/// error; any damage a runtime error "checkpoint PATH is damaged: REASON",
/// REASON being e.g. "checksum mismatch (stored …, computed …)", "truncated or
/// not an HDF5 file", "missing attribute step".
Checkpoint read_checkpoint(const std::string& path);

/// What `lpsgd ckpt info` shows. For a damaged file, meta holds what could be
/// read before the damage was found.
struct CkptInfo {
  std::string path;
  bool valid = false;
  std::string error;      ///< the damage (REASON above) when !valid
  CkptMeta meta;
  uint64_t checksum = 0;  ///< as stored in the file
  size_t tensors = 0;     ///< params + optimizer + state tensors
  size_t bytes = 0;       ///< file size
};

/// Reads and validates like read_checkpoint but reports damage in the result
/// instead of throwing; a missing file is still a usage error.
CkptInfo inspect_checkpoint(const std::string& path);

/// Checkpoint files (DIR/ckpt-<digits>.h5) in `dir`, by step ascending; empty
/// when dir is missing.
std::vector<std::string> list_checkpoints(const std::string& dir);

/// The newest valid checkpoint in `dir` for resuming: the one `latest` names,
/// else the others by step, newest first. Each damaged one is skipped with a
/// warning appended to *warnings ("checkpoint P is damaged (REASON); falling
/// back to the previous one"); temporaries are ignored. Returns "" when dir is
/// missing or holds no valid checkpoint. When `loaded` is given it receives
/// the checkpoint found, so it need not be read twice.
std::string find_resume_checkpoint(const std::string& dir, std::vector<std::string>* warnings,
                                   Checkpoint* loaded = nullptr);

}  // namespace lpsgd::io
