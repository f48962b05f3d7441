#include "comm/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "comm/calibrate.hpp"
#include "comm/collectives/factory.hpp"
#include "comm/links/device_mpi_link.hpp"
#include "comm/links/link_builder.hpp"
#include "comm/links/shm_link.hpp"
#include "comm/requests.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "lpsgd/config.hpp"

namespace lpsgd::comm {

namespace {
constexpr int kTagNoticeFromLeft = 21;
constexpr int kTagNoticeFromRight = 22;
}  // namespace

size_t default_mpi_message_bytes() {
  static const size_t bytes = [] {
    const char* v = std::getenv("LPSGD_MPI_MESSAGE_BYTES");
    // SimGrid's network model has no rendezvous turn-taking to avoid (the
    // same simulated times in whole blocks, docs/simulation.md); cutting
    // blocks there only multiplies the messages it simulates.
    if (!v || !*v) return build::smpi ? size_t{0} : size_t{60} << 10;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    LPSGD_CHECK(end && *end == '\0' && (n == 0 || n >= 64),
                "LPSGD_MPI_MESSAGE_BYTES must be 0 (no limit) or at least 64, got '" << v << "'");
    return static_cast<size_t>(n);
  }();
  return bytes;
}

Communicator::Communicator(MPI_Comm parent, Device& dev, CommOptions opts)
    : dev_(dev), opts_(std::move(opts)) {
  LPSGD_CHECK(opts_.window >= 1 && opts_.window <= ShmControl::kMaxWindow,
              "--window must be in [1, " << ShmControl::kMaxWindow << "], got " << opts_.window);
  LPSGD_CHECK(opts_.slot_bytes >= 8, "slot size must be at least 8 bytes");
  chain_ = std::make_unique<Chain>(parent, opts_.links, opts_.ranks_per_node);
  MPI_CHECK(MPI_Comm_dup(chain_->comm(), &ctrl_comm_));
  MPI_CHECK(MPI_Comm_dup(chain_->comm(), &p2p_comm_));
  MPI_CHECK(MPI_Comm_dup(chain_->comm(), &link_comm_));

  // Both ends of a transfer must split it alike: rank 0's limit for all.
  uint64_t max_message = opts_.mpi_message_bytes;
  MPI_CHECK(MPI_Bcast(&max_message, 1, MPI_UINT64_T, 0, ctrl_comm_));
  opts_.mpi_message_bytes = static_cast<size_t>(max_message);
  stage_host_ = opts_.stage_mpi || !mpi_accepts_device_memory(dev);
  builder_ = std::make_unique<LinkBuilder>(*chain_, dev, link_comm_, opts_.window, opts_.slot_bytes,
                                           opts_.mpi_message_bytes, stage_host_);
  if (chain_->has_left()) links_[0] = builder_->make(0);
  if (chain_->has_right()) links_[1] = builder_->make(1);
  find_local_neighbours();
  // The communicator's id: its rank 0's world rank and count of the
  // communicators that process has made.
  static uint32_t made = 0;
  int world_rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  id_ = (static_cast<uint64_t>(world_rank) << 32) | ++made;
  MPI_CHECK(MPI_Bcast(&id_, 1, MPI_UINT64_T, 0, ctrl_comm_));
  post_error_recv(0);
  post_error_recv(1);

  // Cost model: rank 0 reads the calibration and everyone uses its numbers,
  // so `auto` chooses the same algorithm and block everywhere.
  // Without a file named, the cluster's own one (CostModel::default_path).
  if (chain_->pos() == 0)
    model_ = opts_.calibration_file.empty()
                 ? CostModel::load_if_present(CostModel::default_path(chain_->hosts()))
                 : CostModel::load_or_default(opts_.calibration_file);
  share_model();
  model_.window = opts_.window;
  model_.mpi_message = opts_.mpi_message_bytes;
  if (opts_.calibrate_if_missing && size() > 1 && dev.kind() == DeviceKind::Cpu && !build::smpi)
    choose_calibration();
  if (chain_->pos() == 0 && model_.calibrated && size() > 1) {
    const std::string differ =
        model_.settings_differ(CostModel::settings_now(opts_.window, opts_.mpi_message_bytes));
    if (!differ.empty())
      LPSGD_INFO("this job's settings differ from those " << model_.source << " was measured with: "
                                                          << differ << "; auto prices this job's");
  }
  LPSGD_DEBUG("chain " << chain_->describe());
}

// Everyone uses rank 0's numbers, so `auto` resolves identically everywhere
// (and decides alike whether to keep them: the quality travels too).
void Communicator::share_model() {
  std::array<double, CostModel::kParams + 2> params{};
  const auto p = model_.params();
  std::copy(p.begin(), p.end(), params.begin());
  params[CostModel::kParams] = model_.quality.cpu_share;
  params[CostModel::kParams + 1] = model_.quality.spread;
  MPI_CHECK(MPI_Bcast(params.data(), static_cast<int>(params.size()), MPI_DOUBLE, 0, ctrl_comm_));
  std::array<double, CostModel::kParams> mine{};
  std::copy(params.begin(), params.begin() + CostModel::kParams, mine.begin());
  model_.set_params(mine);
  model_.quality.cpu_share = params[CostModel::kParams];
  model_.quality.spread = params[CostModel::kParams + 1];
  int flags[5] = {model_.mpi_neighbour_links ? 1 : 0, model_.calibrated ? 1 : 0,
                  model_.lp_direct_pairs ? 1 : 0, static_cast<int>(model_.quality.confidence),
                  model_.quality.rounds};
  MPI_CHECK(MPI_Bcast(flags, 5, MPI_INT, 0, ctrl_comm_));
  model_.mpi_neighbour_links = flags[0] == 1;
  model_.calibrated = flags[1] == 1;
  model_.lp_direct_pairs = flags[2] == 1;
  model_.quality.confidence = static_cast<CostModel::Confidence>(flags[3]);
  model_.quality.rounds = flags[4];
}

// `auto` needs a calibration it can trust. Measure (calibrate.cpp, a second
// or two) where there is none of these links, where the one there is not
// sure of itself, or where this job's links no longer fit it; then keep the
// new one only where prefer_fresh() says so, so that a measurement made
// beside other work never replaces a sure one. A calibration file named on
// the command line is the user's: read, never measured again or rewritten.
void Communicator::choose_calibration() {
  std::string why;
  const bool named = !opts_.calibration_file.empty();
  if (!model_.calibrated) {
    why = "no calibration of these links yet";
  } else if (named) {
    return;
  } else {
    // The links as this job finds them, also a probe of whether the node is
    // quiet enough to measure anything.
    const LinkCheck k = check_links(*this, model_);
    const char* link = k.kind == LinkKind::Mpi ? "MPI" : "peer";
    std::ostringstream os;
    os << std::setprecision(3) << "a 256 KiB block took " << 1e3 * k.measured_s << " ms, it predicts "
       << 1e3 * k.predicted_s << " ms";
    const bool sure = model_.quality.confidence == CostModel::Confidence::High;
    if (k.result == LinkCheck::Busy) {
      if (chain_->pos() == 0)
        LPSGD_INFO("the calibration in " << model_.source << " is " << (sure ? "used" : "used, not sure of itself,")
                                         << " unchecked: the " << link
                                         << " link measured without a core to itself (cpu share "
                                         << std::setprecision(2) << k.cpu_share << "; " << os.str()
                                         << "): the node is busy, and a measurement now would be too");
      return;
    }
    if (sure && k.result == LinkCheck::Fits) return;
    if (!sure) {
      why = "the calibration in " + model_.source + " is not sure of itself (" +
            (model_.quality.note.empty() ? std::string("made before calibrations said so")
                                         : model_.quality.note) +
            ") and the node is quiet now";
    } else {
      // The same nodes, other links (another rate, another network): a
      // measurement with a core to itself says the numbers are wrong, so
      // they count as unsure against the new ones.
      why = "the calibration in " + model_.source + " no longer fits the " + link + " links (" + os.str() + ")";
      model_.quality.confidence = CostModel::Confidence::Low;
      model_.quality.cpu_share = 0;
      model_.quality.note = "no longer fits the " + std::string(link) + " links";
    }
  }
  if (chain_->pos() == 0) LPSGD_INFO(why << ": measuring");
  const double t0 = now_s();
  CostModel fresh = calibrate(chain_->comm(), dev_, opts_.ranks_per_node, 50, opts_.window,
                              opts_.mpi_message_bytes);
  const std::string path = named ? opts_.calibration_file : CostModel::default_path(chain_->hosts());
  fresh.calibrated = true;
  fresh.source = path + " (measured now)";
  fresh.window = opts_.window;
  fresh.mpi_message = opts_.mpi_message_bytes;
  std::string reason;
  const bool use = prefer_fresh(model_, fresh, &reason);
  if (chain_->pos() == 0) {
    std::ostringstream took;
    took << std::fixed << std::setprecision(1) << now_s() - t0 << " s";
    if (!use) {
      LPSGD_INFO("measured again in " << took.str() << ", and kept " << model_.source << ": " << reason
                                      << " (the new one: " << fresh.quality_text() << ")");
    } else {
      try {
        fresh.save(path);
        char hash[16];
        std::snprintf(hash, sizeof hash, "%08x", fresh.inputs_hash());
        LPSGD_INFO("cost model calibrated in " << took.str() << ", kept in " << path << " (" << reason
                                               << "): " << fresh.quality_text() << ", inputs " << hash);
      } catch (const Error& e) {
        LPSGD_WARN("cost model calibrated, but not kept: " << e.message());
        fresh.source = "measured now, not kept";
      }
    }
  }
  if (use) model_ = fresh;
  share_model();
}

Communicator::~Communicator() {
  // A notice is far below every MPI library's eager limit: a notice receive
  // that has matched has its bytes already, and a send's were copied when it
  // was posted (one left in flight completes in the background, so the
  // neighbours still learn of the error): neither touches this object again.
  const double deadline = release_deadline();
  end_receives(notice_req_.data(), notice_req_.size(), deadline);
  end_sends(notice_send_.data(), notice_send_.size(), deadline);
  links_[0].reset();
  links_[1].reset();
  tree_links_.clear();
  builder_.reset();
  // After a failed collective, messages may be left unreceived (a signature
  // or block sent to a rank that had given up). Freed, these communicators'
  // context ids could be reused by the next communicator over the same ranks
  // (MPICH does), which would then receive them: they are kept instead, one
  // set per failure, which in practice ends the job anyway.
  if (failed_) return;
  for (MPI_Comm* c : {&ctrl_comm_, &p2p_comm_, &link_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

// Which neighbours run on this machine, and as which pid: the host name and
// the pid namespace must match, or a pid names another process (or none).
void Communicator::find_local_neighbours() {
  // Simulated ranks are threads of one process whose pids SMPI makes up.
  if (build::smpi) return;
  struct Id {
    int pid;
    char where[252];
  } me{}, all[3]{};
  me.pid = static_cast<int>(::getpid());
  char host[128] = {}, ns[96] = {};
  ::gethostname(host, sizeof host - 1);
  if (::readlink("/proc/self/ns/pid", ns, sizeof ns - 1) < 0) ns[0] = '\0';
  std::snprintf(me.where, sizeof me.where, "%s %s", host, ns);
  const int pos = chain_->pos();
  all[1] = me;
  // One exchange with each neighbour, right first: the chain's right end
  // starts, so the pairs complete from there without a cycle of waits.
  if (chain_->has_right())
    MPI_CHECK(MPI_Sendrecv(&me, sizeof me, MPI_BYTE, pos + 1, 31, &all[2], sizeof me, MPI_BYTE,
                           pos + 1, 31, ctrl_comm_, MPI_STATUS_IGNORE));
  if (chain_->has_left())
    MPI_CHECK(MPI_Sendrecv(&me, sizeof me, MPI_BYTE, pos - 1, 31, &all[0], sizeof me, MPI_BYTE,
                           pos - 1, 31, ctrl_comm_, MPI_STATUS_IGNORE));
  for (int side = 0; side < 2; ++side) {
    const Id& n = all[side == 0 ? 0 : 2];
    if (n.pid > 0 && n.pid != me.pid && me.where[0] && std::strcmp(n.where, me.where) == 0)
      local_pid_[static_cast<size_t>(side)] = n.pid;
  }
}

std::string Communicator::lost_neighbour() const {
  for (int side = 0; side < 2; ++side) {
    const int pid = local_pid_[static_cast<size_t>(side)];
    if (pid <= 0) continue;
    // Gone, or a zombie its parent has not reaped yet.
    char path[64], buf[512] = {};
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    bool gone = true;
    if (FILE* f = std::fopen(path, "r")) {
      const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      const char* paren = std::strrchr(buf, ')');
      gone = n == 0 || !paren || paren[1] != ' ' || paren[2] == 'Z' || paren[2] == 'X';
    }
    if (gone)
      return "rank " + std::to_string(chain_->pos() + (side == 0 ? -1 : 1)) + " (" +
             (side == 0 ? "left" : "right") + " neighbour, pid " + std::to_string(pid) +
             ") has ended (killed or crashed)";
  }
  return "";
}

void Communicator::post_error_recv(int side) {
  const bool present = side == 0 ? chain_->has_left() : chain_->has_right();
  if (!present) return;
  const int peer = chain_->pos() + (side == 0 ? -1 : 1);
  const int tag = side == 0 ? kTagNoticeFromLeft : kTagNoticeFromRight;
  MPI_CHECK(MPI_Irecv(notice_in_[static_cast<size_t>(side)].data(), kNoticeBytes, MPI_CHAR, peer,
                      tag, ctrl_comm_, &notice_req_[static_cast<size_t>(side)]));
  notice_posted_[static_cast<size_t>(side)] = true;
}

void Communicator::check_errors() {
  for (int side = 0; side < 2; ++side) {
    if (!notice_posted_[static_cast<size_t>(side)]) continue;
    if (!test_request(notice_req_[static_cast<size_t>(side)])) continue;
    notice_posted_[static_cast<size_t>(side)] = false;
    const auto& in = notice_in_[static_cast<size_t>(side)];
    uint64_t from = 0;
    std::memcpy(&from, in.data(), kNoticeHeader);
    if (from != id_) {  // a late notice of an earlier communicator's failure
      post_error_recv(side);
      continue;
    }
    std::string text(in.data() + kNoticeHeader, strnlen(in.data() + kNoticeHeader, kNoticeBytes - kNoticeHeader));
    failed_ = true;
    // Pass it on, away from where it came from, so it reaches the whole chain.
    send_notice(1 - side, text);
    LPSGD_THROW("aborted: " << text);
  }
  LPSGD_CHECK(!failed_, "communicator unusable after an earlier collective error");
}

void Communicator::report_error(const std::string& message) {
  if (failed_) return;
  failed_ = true;
  const std::string text = "rank " + std::to_string(chain_->pos()) + ": " + message;
  send_notice(0, text);
  send_notice(1, text);
}

void Communicator::send_notice(int side, const std::string& text) {
  const bool present = side == 0 ? chain_->has_left() : chain_->has_right();
  MPI_Request& req = notice_send_[static_cast<size_t>(side)];
  if (!present || req != MPI_REQUEST_NULL) return;  // one notice per side is enough
  auto& buf = notice_out_[static_cast<size_t>(side)];
  buf.fill('\0');
  std::memcpy(buf.data(), &id_, kNoticeHeader);
  std::memcpy(buf.data() + kNoticeHeader, text.data(),
              std::min(text.size(), kNoticeBytes - kNoticeHeader - 1));
  const int peer = chain_->pos() + (side == 0 ? -1 : 1);
  const int tag = side == 0 ? kTagNoticeFromRight : kTagNoticeFromLeft;
  MPI_Isend(buf.data(), kNoticeBytes, MPI_CHAR, peer, tag, ctrl_comm_, &req);
}

void Communicator::pending_requests(std::vector<MPI_Request*>& out) {
  for (const auto& L : links_)
    if (L) L->pending_requests(out);
  for (const auto& [key, L] : tree_links_) L->pending_requests(out);
  for (auto& r : notice_req_)
    if (r != MPI_REQUEST_NULL) out.push_back(&r);
}

Link* Communicator::tree_link(int t, int peer) {
  LPSGD_CHECK(t == 0 || t == 1, "tree " << t << " (the double tree has trees 0 and 1)");
  LPSGD_CHECK(peer >= 0 && peer < size() && peer != rank(), "tree link to rank " << peer);
  std::unique_ptr<Link>& L = tree_links_[{t, peer}];
  if (!L) {
    // On the chain links' communicator, with tags of its own: 11 + 2t travels
    // from the lower rank to the higher, 12 + 2t back.
    const int up = 11 + 2 * t, down = 12 + 2 * t;
    const bool lower = rank() < peer;
    L = builder_->make_mpi(link_comm_, peer, lower ? up : down, lower ? down : up);
  }
  return L.get();
}

void* Communicator::scratch(int which, size_t bytes) {
  DeviceBuffer& b = scratch_[static_cast<size_t>(which)];
  if (b.bytes() < bytes) b = DeviceBuffer(dev_, bytes);
  return b.data();
}

void* Communicator::host_stage(int which, size_t bytes) {
  PinnedBuffer& b = host_stage_[static_cast<size_t>(which)];
  if (b.bytes() < bytes) b = PinnedBuffer(dev_, bytes);
  return b.data();
}

void* Communicator::alloc_shared(size_t bytes) {
  if (builder_ && builder_->shm())
    if (void* p = builder_->shm()->alloc_region(bytes)) return p;
  owned_.emplace_back(dev_, bytes);
  return owned_.back().data();
}

void Communicator::reserve_scratch(size_t bytes) {
  scratch(0, bytes);
  scratch(1, bytes);
  if (stage_host_)
    for (int i = 0; i < static_cast<int>(host_stage_.size()); ++i) host_stage(i, bytes);
}

std::pair<Algo, size_t> Communicator::resolve(Algo algo, const CollArgs& args,
                                              size_t block_bytes) const {
  const size_t esize = dtype_size(args.dtype);
  const size_t n = args.count * esize;
  if (algo == Algo::Auto) algo = model_.best_algo(args.kind, n, size(), args.root, *chain_);
  if (!uses_blocks(algo)) return {algo, 0};
  size_t b = block_bytes ? block_bytes
                         : static_cast<size_t>(model_.best_block(algo, args.kind, n, size(), args.root,
                                                                 LinkMix::of(*chain_)));
  b = std::min(b, opts_.slot_bytes);
  b = std::max(esize, b / esize * esize);
  return {algo, b};
}

std::unique_ptr<Collective> Communicator::create(Algo algo, const CollArgs& args,
                                                 size_t block_bytes) {
  LPSGD_CHECK(args.count == 0 || args.out || args.kind == CollKind::Reduce,
              coll_name(args.kind) << ": no output buffer");
  auto [a, b] = resolve(algo, args, block_bytes);
  if (args.in_float) {
    LPSGD_CHECK(dtype_is_16bit(args.dtype) && args.kind != CollKind::Bcast,
                coll_name(args.kind) << " of " << dtype_name(args.dtype)
                                     << ": a float input is for 16-bit reductions only");
    LPSGD_CHECK(args.count == 0 || (args.in && args.in != args.out),
                coll_name(args.kind) << ": a float input cannot be reduced in place");
    LPSGD_CHECK(reads_float_input(a), algo_name(a) << " reads its input as " << dtype_name(args.dtype)
                                                   << ": convert the float input first");
  }
  return make_collective(*this, a, args, b);
}

void Communicator::run(Algo algo, const CollArgs& args, size_t block_bytes) {
  auto c = create(algo, args, block_bytes);
  c->start();
  c->wait();
}

}  // namespace lpsgd::comm
