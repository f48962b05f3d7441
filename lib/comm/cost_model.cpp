#include "comm/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <unistd.h>

#include "comm/chain.hpp"
#include "core/error.hpp"

namespace lpsgd::comm {

namespace {
double log2ceil(int P) { return P <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(P))); }
int pof2_floor(int P) {
  int p = 1;
  while (p * 2 <= P) p *= 2;
  return p;
}
// LP depth: hops from the farthest end of the chain to the centre.
int lp_depth(CollKind kind, int P, int root) {
  const int c = kind == CollKind::Allreduce ? (P - 1) / 2 : root;
  return std::max(c, P - 1 - c);
}
// Pipeline start-up steps S in T = (S + k)(α + bβ'). Peer links read blocks
// in place, except that a bcast root first copies each block in -> out, a
// stage of its own.
double lp_startup(CollKind kind, int P, int root, LinkMix mix) {
  const int D = lp_depth(kind, P, root);
  if (D == 0) return 0;
  if (kind == CollKind::Allreduce) return 2.0 * D - 1;
  return D - 1.0 + (kind == CollKind::Bcast && mix.shm ? 1.0 : 0.0);
}
// Chain neighbours of the centre (the root, or the allreduce turning point).
int centre_sides(CollKind kind, int P, int root) {
  const int c = kind == CollKind::Allreduce ? (P - 1) / 2 : root;
  return (c > 0 ? 1 : 0) + (c < P - 1 ? 1 : 0);
}
// Pipelined double binary tree (collectives/tree.cpp) on P ranks: the levels
// of each tree below its root, D = ⌊log₂Q⌋, Q = P − 1 ranks below a bcast or
// reduce root, P in an allreduce.
int tree_levels(CollKind kind, int P) {
  const int Q = kind == CollKind::Allreduce ? P : P - 1;
  int d = 0;
  while ((2 << d) <= Q) ++d;
  return d;
}
}  // namespace

bool lp_shares_reductions(CollKind kind, int P) {
  // Off unless LPSGD_LP_PAIR=1: on the 2-core VMs measured so far, whose two
  // cores share one memory bus, it was 5-10% slower than one centre (both
  // ranks then read and write as much in total, and the fixed message order
  // couples the ranks more tightly); it should pay where each core, not the
  // bus, limits a rank's passes over memory. docs/collectives.md has the runs.
  static const bool pair = [] {
    const char* v = std::getenv("LPSGD_LP_PAIR");
    return v && std::string(v) == "1";
  }();
  return pair && kind == CollKind::Allreduce && P == 2;
}

bool lp_direct(CollKind kind, int P) {
  static const bool on = [] {
    const char* v = std::getenv("LPSGD_LP_DIRECT");
    return !(v && std::string(v) == "0");
  }();
  return on && P == 2 && !lp_shares_reductions(kind, P);
}

size_t ring_chunk_bytes() {
  static const size_t b = [] {
    const char* v = std::getenv("LPSGD_RING_CHUNK_BYTES");
    const long long x = v && *v ? std::atoll(v) : 0;
    return x > 0 ? static_cast<size_t>(x) : size_t{256} << 10;
  }();
  return b;
}

LinkMix LinkMix::of(const Chain& c) {
  // The same answer on every rank, so that `auto` resolves identically.
  LinkMix m;
  bool same_node_pair = false;
  for (int p = 0; p + 1 < c.size(); ++p) same_node_pair |= c.node_of(p) == c.node_of(p + 1);
  m.shm = c.links() == LinksMode::Auto && same_node_pair;
  m.mpi = c.links() == LinksMode::Mpi || c.nodes() > 1 || !m.shm;
  for (int p = 0, run = 0; p < c.size(); ++p) {
    run = p > 0 && c.node_of(p) == c.node_of(p - 1) ? run + 1 : 1;
    m.node_ranks = std::max(m.node_ranks, run);
  }
  return m;
}

bool supports(Algo algo, CollKind kind) {
  return !(algo == Algo::Ring && kind != CollKind::Allreduce);
}

double CostModel::lp_alpha(LinkMix m) const {
  return std::max(m.shm ? alpha_shm : 0.0, m.mpi ? alpha_mpi : 0.0);
}
double CostModel::lp_beta(LinkMix m) const {
  return std::max(m.shm ? beta_shm : 0.0, m.mpi ? beta_mpi : 0.0);
}

// The steady-state time per block of the busiest resource (see the header).
double CostModel::lp_period(CollKind kind, int P, int root, double b, LinkMix m) const {
  const int sides = centre_sides(kind, P, root);
  // Two ranks that take turns as the centre each reduce half the blocks.
  const bool shared = lp_shares_reductions(kind, P);
  double p = 0;
  if (m.mpi) {
    // Streams into the busiest NIC and reductions per block on its rank.
    int s = sides, r = 0;
    if (kind == CollKind::Reduce) r = sides;
    if (kind == CollKind::Allreduce) {
      s = P > 2 ? 2 : 1;
      r = sides;
    }
    if (mpi_neighbour_links) s = 1;  // every stream has a link of its own
    const double link = alpha_mpi + s * b * beta_mpi, compute = r * b * gamma * (shared ? 0.5 : 1.0);
    p = std::max(p, window > 1 ? std::max(link, compute) : link + compute);
  }
  if (m.shm) {
    // Each rank's work per byte of a block, in copies (c = β_shm/2) and
    // reductions. Blocks are read in place (zero-copy peer links: buffers
    // from Communicator::alloc_shared), so forwarding costs nothing; a rank
    // copies only what it receives into its own output. The ranks run on
    // cores of their own, but their copies stream through the one memory of
    // the node: the period is the busiest rank's work or the node's copies,
    // whichever is longer.
    const double c = beta_shm / 2;
    const int centre = kind == CollKind::Allreduce ? (P - 1) / 2 : root;
    struct Work {
      double copy, reduce;
    };
    auto work = [&](bool is_centre, bool is_end) -> Work {
      switch (kind) {
        case CollKind::Bcast:  // root in -> out; every other rank the neighbour's block -> out
          return {c, 0};
        case CollKind::Reduce:  // neighbour's partial + mine -> my partial; the far ends send in place
          return {0, is_centre ? sides * gamma : (is_end ? 0 : gamma)};
        case CollKind::Allreduce:  // partial sums in, then the neighbour's result -> out
          return is_centre ? Work{0, sides * gamma} : Work{c, is_end ? 0 : gamma};
      }
      return {0, 0};
    };
    double busiest = 0, copies = 0;
    if (m.mpi) {  // several nodes: a node's ranks are mostly inner ranks
      const Work w = work(false, false);
      busiest = w.copy + w.reduce;
      copies = std::max(1, m.node_ranks) * w.copy;
    } else {      // one node: every rank of the chain
      for (int q = 0; q < P; ++q) {
        const Work w = work(q == centre, q == 0 || q == P - 1);
        busiest = std::max(busiest, w.copy + w.reduce);
        copies += w.copy;
      }
      if (shared) {  // both ranks: half the blocks reduced, half copied
        const Work ce = work(true, true), end = work(false, true);
        busiest = 0.5 * (ce.copy + ce.reduce + end.copy + end.reduce);
      }
    }
    p = std::max(p, alpha_shm + b * std::max(busiest, copies));
  }
  return p;
}

double CostModel::predict(Algo algo, CollKind kind, double n, int P, int root, double block,
                          LinkMix mix) const {
  if (!supports(algo, kind)) return std::numeric_limits<double>::infinity();
  if (algo == Algo::Mpi || algo == Algo::Auto) return std::numeric_limits<double>::quiet_NaN();
  if (P <= 1 || n <= 0) return 0.0;
  const double a = alpha_mpi, bt = beta_mpi, g = gamma;
  const double frac = (P - 1.0) / P;
  // The baselines' messages go through MPI. Across nodes each rank has its own
  // link; on one node they are copies through the memory all ranks share, and
  // β_mpi, γ are measured one pair at a time: there the bytes every rank moves
  // add up (nm for BE and ring, whose ranks all move data in every round).
  // A network of links between chain neighbours only (a ring or chain of
  // point-to-point links): the trees and BE send between ranks many links
  // apart, whose flows share those links in ways this model does not price,
  // so their time is unknown (and auto never picks them there). LP talks to
  // chain neighbours only, ring too but for its closing message (below).
  if (mpi_neighbour_links && mix.mpi && P > 2 &&
      (algo == Algo::Tree || algo == Algo::Mst || algo == Algo::Be))
    return std::numeric_limits<double>::quiet_NaN();
  const bool one_node = mix.shm && !mix.mpi;
  const double nm = one_node ? n * P : n;
  // MST and BE run round by round (schedule.cpp): a round's stream to one
  // partner must end, and its sums be made, before the next round's stream
  // to another partner starts, so across a network every round also pays
  // an emptied pipe: its last MPI message's transfer (at most mpi_message
  // bytes, at most the round's own bytes) overlaps nothing. LP, the tree and
  // the ring stream without such breaks. (Measured across 4 namespaces at
  // 200 Mbit/s: BE's 8 MiB allreduce took 12-50 ms more than the ring's,
  // whose model was only 0.1 ms apart.) A round of small messages is one
  // short message: charging it a whole mpi_message had BE's 64 KiB allreduce
  // at P = 256 on 2 us, 25 Gb/s links at 0.42 ms against 0.11 ms simulated,
  // and auto took the tree (0.16 ms).
  const double limit = mix.mpi ? static_cast<double>(mpi_message) : 0.0;
  const auto round = [&](double bytes) { return a + std::min(limit, bytes) * bt; };
  // Recursive halving (or doubling) over p2 ranks: rounds of n/2, n/4, ...
  const auto halving = [&](int p2) {
    double t = 0;
    for (int q = p2; q > 1; q /= 2) t += round(n * q / (2.0 * p2));
    return t;
  };
  switch (algo) {
    case Algo::Lp: {
      // Two ranks of one node, each doing half: each reads and writes the
      // bytes of a copy of the message in an allreduce (as the ranks of a
      // pipelined bcast do in its steady state), 3/4 of that in a bcast
      // (reads n/2, writes n) or a reduce (reads n, writes n/2); two meetings
      // (the tokens). lp_direct_pairs is rank 0's, so every rank prices alike.
      if (one_node && lp_direct_pairs && P == 2 && !lp_shares_reductions(kind, P))
        return alpha_shm + (kind == CollKind::Allreduce ? 1.0 : 0.75) *
                               lp_period(CollKind::Bcast, P, 0, n, mix);
      const double b = std::max(1.0, std::min(block, n));
      const double k = std::ceil(n / b);
      const double hop = lp_alpha(mix) + b * (lp_beta(mix) + (kind == CollKind::Bcast ? 0.0 : g));
      return lp_startup(kind, P, root, mix) * hop + k * lp_period(kind, P, root, b, mix);
    }
    case Algo::Tree:
      return tree_time(kind, n, P, std::max(1.0, std::min(block, n / 2)), mix);
    case Algo::Mst: {
      // One node: every message is a copy through the shared memory, so the
      // P − 1 messages' bytes add up instead of overlapping in log P rounds.
      const double L = log2ceil(P), Ln = one_node ? P - 1.0 : L;
      const double bcast = L * round(n) + Ln * n * bt, reduce = L * round(n) + Ln * n * (bt + g);
      return kind == CollKind::Bcast ? bcast : kind == CollKind::Reduce ? reduce : bcast + reduce;
    }
    case Algo::Be: {
      const int p2 = pof2_floor(P);
      const double f2 = (p2 - 1.0) / p2;
      const double fold = P != p2 ? round(n) + nm * (bt + g) : 0.0;  // extra ranks fold in
      if (kind == CollKind::Bcast)  // binomial scatter + ring allgather
        return halving(pof2_floor(2 * P - 1)) + frac * nm * bt + (P - 1) * round(n / P) + frac * nm * bt;
      if (kind == CollKind::Reduce)  // reduce-scatter + gather to the root
        return fold + halving(p2) + f2 * nm * (bt + g) + round(f2 * n) + f2 * nm * bt;
      return fold + 2 * halving(p2) + 2 * f2 * nm * bt + f2 * nm * g + (P != p2 ? round(n) + nm * bt : 0.0);
    }
    case Algo::Ring: {
      // On neighbour links the chain is not closed: the ring's last message
      // of every round crosses all P − 1 links back to the first rank. The
      // reductions overlap the transfers of other chunks (ring.cpp forwards
      // chunk by chunk): what stays exposed is about one chunk's per
      // reduce-scatter round, all of them where a segment is one chunk.
      const double seg = nm / P, exposed = std::min(seg, static_cast<double>(ring_chunk_bytes()));
      return 2 * (P - 1) * ((mpi_neighbour_links && mix.mpi ? P - 1.0 : 1.0) * a + seg * bt) +
             (P - 1) * exposed * g;
    }
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

// Pipelined double binary tree. Each tree carries n/2 in k = ⌈n/2b⌉ blocks.
// A rank is inner in one tree: it takes a block from each tree's parent and
// sends two to its children per step, so its NIC moves 2b each way per step
// (c = 2); in an allreduce the reduce and broadcast waves overlap and it moves
// 4b (c = 4): the bandwidth term is nβ (bcast, reduce) or 2nβ (allreduce),
// the chain's. The fill is S hops, S = D + 1 (root to the deepest leaf) or 2D
// (an allreduce: up and back down), each a block sent to two children at once.
// T = S·h + (k − 1)·p, h = α + 2b(β + γ'), p = α + c·b'β (+ 2b'γ per reduction
// step, overlapped when W ≥ 2), γ' = γ where the hop ends in a reduction, and
// b' = (n/2 − b)/(k − 1) the mean of the later blocks (the last one is short).
// On one node the ranks' copies share one memory (×P, as for BE and ring).
double CostModel::tree_time(CollKind kind, double n, int P, double b, LinkMix mix) const {
  if (P <= 1 || n <= 0) return 0.0;
  const int D = tree_levels(kind, P);
  const bool all = kind == CollKind::Allreduce;
  const double S = all ? 2.0 * D : D + 1.0;
  double beta = beta_mpi;
  if (mix.shm && !mix.mpi) beta *= P;
  const double a_hop = alpha_mpi, a_fill = alpha_mpi;
  const double g = kind == CollKind::Bcast ? 0.0 : gamma;
  const double k = std::ceil(n / 2 / b);
  // A fill hop sends a block to two children at once, except in an
  // allreduce over fewer than 3 ranks, where no tree rank has two.
  const double h = a_fill + (all && P < 3 ? 1 : 2) * b * (beta + g);
  // Blocks through the busiest NIC per step: an allreduce rank inner in one
  // tree with a parent there takes 2 partials and 1 result and sends 1 partial
  // and 2 results, and 1 of each as a leaf of the other tree; with Q < 4 no
  // inner rank has both a parent and two children.
  const int Q = all ? P : P - 1;
  const double c = all ? (Q >= 4 ? 4 : Q) : 2;
  // The k − 1 steps after the fill carry the rest of the half, n/2 − b: the
  // last block is short, and counting it as a whole one overstated small
  // messages by up to a block (6% at P = 2, 64 KiB).
  const double rest = k > 1 ? (n / 2 - b) / (k - 1) : 0.0;
  const double link = a_hop + c * rest * beta, compute = 2 * rest * g;
  const double p = window > 1 ? std::max(link, compute) : link + compute;
  return S * h + (k - 1) * p;
}

double CostModel::best_block(Algo algo, CollKind kind, double n, int P, int root, LinkMix mix) const {
  if (algo != Algo::Tree) return best_block(kind, n, P, root, mix);
  if (n <= 0) return 1;
  // Minimising S·h + k·α over b: b* = √(nα / (4S(β + γ'))), searched around
  // it since the per-rank loads differ between fill and steady state.
  const int D = tree_levels(kind, P);
  const double S = kind == CollKind::Allreduce ? 2.0 * D : D + 1.0;
  const double per_byte = beta_mpi + (kind == CollKind::Bcast ? 0.0 : gamma);
  double b0 = std::sqrt(n * alpha_mpi / (4 * S * per_byte));
  b0 = std::min(std::max(b0, 64.0), std::max(64.0, n / 2));
  double best = b0, best_t = tree_time(kind, n, P, b0, mix);
  for (double f = 0.25; f <= 4.0; f *= 1.189207) {
    const double b = std::min(std::max(b0 * f, 64.0), std::max(64.0, n / 2));
    const double t = tree_time(kind, n, P, b, mix);
    if (t < best_t) {
      best_t = t;
      best = b;
    }
  }
  return best;
}

double CostModel::best_block(CollKind kind, double n, int P, int root, LinkMix mix) const {
  const double S = lp_startup(kind, P, root, mix);
  if (n <= 0) return 1;
  if (S <= 0) return n;  // nothing to pipeline against: one block
  const double per_byte = lp_beta(mix) + (kind == CollKind::Bcast ? 0.0 : gamma);
  return std::max(1.0, std::sqrt(n * lp_alpha(mix) / (S * per_byte)));
}

Algo CostModel::best_algo(CollKind kind, double n, int P, int root, LinkMix mix) const {
  Algo best = Algo::Lp;
  double best_t = std::numeric_limits<double>::infinity();
  for (Algo a : {Algo::Lp, Algo::Tree, Algo::Mst, Algo::Be, Algo::Ring}) {
    const double b = uses_blocks(a) ? best_block(a, kind, n, P, root, mix) : 0.0;
    const double t = predict(a, kind, n, P, root, b, mix);
    if (t < best_t) {
      best_t = t;
      best = a;
    }
  }
  return best;
}

void CostModel::set_params(const std::array<double, kParams>& p) {
  alpha_shm = p[0];
  beta_shm = p[1];
  alpha_mpi = p[2];
  beta_mpi = p[3];
  gamma = p[4];
}

std::string CostModel::default_path(const std::vector<std::string>& nodes) {
  if (const char* e = std::getenv("LPSGD_CALIBRATION"); e && *e) return e;
  const char* home = std::getenv("HOME");
  std::string name;
  if (nodes.size() <= 1) {
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    name = nodes.empty() ? host : nodes[0];
  } else {
    uint32_t h = 2166136261u;  // FNV-1a over the names, in order
    for (const std::string& n : nodes)
      for (const char c : n + '\n') h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
    char tail[32];
    std::snprintf(tail, sizeof tail, "+%zu-%08x", nodes.size(), h);
    name = nodes[0] + tail;
  }
  return std::string(home && *home ? home : ".") + "/.cache/lpsgd/calibration-" + name + ".ini";
}

CostModel CostModel::load_if_present(const std::string& path) {
  if (!std::ifstream(path)) return CostModel{};
  return load_or_default(path);
}

namespace {
const char* confidence_name(CostModel::Confidence c) {
  return c == CostModel::Confidence::High ? "high" : c == CostModel::Confidence::Low ? "low" : "unknown";
}
// Texts in the file are one line each: a newline would end the value.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}
}  // namespace

CostModel CostModel::load_or_default(const std::string& path_in) {
  CostModel m;
  const std::string path = path_in.empty() ? default_path() : path_in;
  std::ifstream in(path);
  if (!in) {
    LPSGD_CHECK(path_in.empty(), "cannot open calibration file '" << path_in << "'");
    return m;
  }
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#' || line[0] == ';' || line[0] == '[') continue;
    const auto eq = line.find('=');
    LPSGD_CHECK(eq != std::string::npos,
                path << ":" << lineno << ": expected 'name = value', got '" << line << "'");
    std::string key = line.substr(0, eq);
    key.erase(std::remove(key.begin(), key.end(), ' '), key.end());
    std::string text = line.substr(eq + 1);
    text.erase(0, text.find_first_not_of(' '));
    // The texts: how sure the calibration is, why, and when it was made.
    if (key == "confidence") {
      LPSGD_CHECK(text == "high" || text == "low" || text == "unknown",
                  path << ":" << lineno << ": confidence must be high, low or unknown, got '" << text << "'");
      m.quality.confidence = text == "high" ? Confidence::High : text == "low" ? Confidence::Low : Confidence::Unknown;
      continue;
    }
    if (key == "note") {
      m.quality.note = text;
      continue;
    }
    if (key == "measured") {
      m.quality.measured = text;
      continue;
    }
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      LPSGD_THROW(path << ":" << lineno << ": bad number in '" << line << "'");
    }
    const auto whole = [&](const char* what, double lo) {
      LPSGD_CHECK(std::isfinite(v) && v >= lo && v == std::floor(v),
                  path << ":" << lineno << ": " << what << " must be a whole number >= " << lo);
    };
    // Flags and settings (recorded: measured_with), then the quality.
    if (key == "mpi_neighbour_links" || key == "lp_direct" || key == "lp_pair") {
      LPSGD_CHECK(v == 0 || v == 1, path << ":" << lineno << ": " << key << " must be 0 or 1");
      if (key == "mpi_neighbour_links") m.mpi_neighbour_links = v == 1;
      else (key == "lp_direct" ? m.measured_with.lp_direct : m.measured_with.lp_pair) = static_cast<int>(v);
      continue;
    }
    if (key == "window" || key == "mpi_message_bytes" || key == "ring_chunk_bytes" || key == "rounds") {
      whole(key.c_str(), key == "mpi_message_bytes" ? 0 : 1);
      if (key == "window") m.measured_with.window = static_cast<int>(v);
      else if (key == "mpi_message_bytes") m.measured_with.mpi_message = static_cast<long long>(v);
      else if (key == "ring_chunk_bytes") m.measured_with.ring_chunk = static_cast<long long>(v);
      else m.quality.rounds = static_cast<int>(v);
      continue;
    }
    if (key == "cpu_share" || key == "spread") {
      LPSGD_CHECK(std::isfinite(v) && v >= 0, path << ":" << lineno << ": " << key << " must be >= 0");
      (key == "cpu_share" ? m.quality.cpu_share : m.quality.spread) = v;
      continue;
    }
    // γ may be 0: reductions free, the pure α-β model (e.g. a simulated network alone).
    LPSGD_CHECK(std::isfinite(v) && (v > 0 || (v == 0 && key == "gamma")),
                path << ":" << lineno << ": " << key << " must be positive");
    if (key == "alpha_shm") m.alpha_shm = v;
    else if (key == "beta_shm") m.beta_shm = v;
    else if (key == "alpha_mpi") m.alpha_mpi = v;
    else if (key == "beta_mpi") m.beta_mpi = v;
    else if (key == "gamma") m.gamma = v;
    // other keys (comments about how it was measured) are ignored
  }
  m.calibrated = true;
  m.source = path;
  return m;
}

void CostModel::save(const std::string& path) const {
  const auto slash = path.rfind('/');
  if (slash != std::string::npos) {
    std::error_code ec;
    std::filesystem::create_directories(path.substr(0, slash), ec);
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    LPSGD_CHECK(out, "cannot write calibration file '" << tmp << "'");
    // Every digit: the run that reads this chooses as the one that wrote it.
    out.precision(17);
    out << "# lpsgd calibration: alpha in s, beta and gamma in s/byte (lib/comm/calibrate.cpp)\n"
        << "alpha_shm = " << alpha_shm << "\nbeta_shm = " << beta_shm << "\n"
        << "alpha_mpi = " << alpha_mpi << "\nbeta_mpi = " << beta_mpi << "\n"
        << "gamma = " << gamma << "\n";
    if (mpi_neighbour_links) out << "mpi_neighbour_links = 1\n";
    out << "# how sure: high only where every round ran with a core to itself and the rounds agreed\n"
        << "confidence = " << confidence_name(quality.confidence) << "\n";
    if (quality.rounds > 0) out << "rounds = " << quality.rounds << "\n";
    out.precision(3);
    if (quality.cpu_share > 0) out << "cpu_share = " << quality.cpu_share << "\n";
    if (quality.spread > 0) out << "spread = " << quality.spread << "\n";
    if (!quality.note.empty()) out << "note = " << one_line(quality.note) << "\n";
    if (!quality.measured.empty()) out << "measured = " << one_line(quality.measured) << "\n";
    const Settings& w = measured_with;
    if (w.window > 0 || w.mpi_message >= 0 || w.lp_direct >= 0 || w.lp_pair >= 0 || w.ring_chunk > 0)
      out << "# the settings it was measured under (a run with others says so)\n";
    if (w.window > 0) out << "window = " << w.window << "\n";
    if (w.mpi_message >= 0) out << "mpi_message_bytes = " << w.mpi_message << "\n";
    if (w.lp_direct >= 0) out << "lp_direct = " << w.lp_direct << "\n";
    if (w.lp_pair >= 0) out << "lp_pair = " << w.lp_pair << "\n";
    if (w.ring_chunk > 0) out << "ring_chunk_bytes = " << w.ring_chunk << "\n";
    LPSGD_CHECK(out.good(), "error writing '" << tmp << "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    LPSGD_THROW("cannot rename '" << tmp << "' to '" << path << "'");
  }
}

CostModel::Settings CostModel::settings_now(int window, size_t mpi_message) {
  Settings s;
  s.window = window;
  s.mpi_message = static_cast<long long>(mpi_message);
  s.lp_direct = lp_direct(CollKind::Bcast, 2) ? 1 : 0;
  s.lp_pair = lp_shares_reductions(CollKind::Allreduce, 2) ? 1 : 0;
  s.ring_chunk = static_cast<long long>(ring_chunk_bytes());
  return s;
}

std::string CostModel::settings_differ(const Settings& now) const {
  std::ostringstream os;
  const auto differ = [&](const char* name, long long mine, long long then, bool recorded) {
    if (!recorded || mine == then) return;
    os << (os.tellp() > 0 ? ", " : "") << name << " " << mine << " (measured with " << then << ")";
  };
  const Settings& w = measured_with;
  differ("window", now.window, w.window, w.window > 0);
  differ("MPI message bytes", now.mpi_message, w.mpi_message, w.mpi_message >= 0);
  differ("LPSGD_LP_DIRECT", now.lp_direct, w.lp_direct, w.lp_direct >= 0);
  differ("LPSGD_LP_PAIR", now.lp_pair, w.lp_pair, w.lp_pair >= 0);
  differ("ring chunk bytes", now.ring_chunk, w.ring_chunk, w.ring_chunk > 0);
  return os.str();
}

uint32_t CostModel::inputs_hash() const {
  uint32_t h = 2166136261u;
  const auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 16777619u;
  };
  for (const double v : params()) mix(&v, sizeof v);
  const long long ints[] = {mpi_neighbour_links ? 1 : 0,
                            lp_direct_pairs ? 1 : 0,
                            window,
                            static_cast<long long>(mpi_message),
                            lp_shares_reductions(CollKind::Allreduce, 2) ? 1 : 0,
                            static_cast<long long>(ring_chunk_bytes())};
  mix(ints, sizeof ints);
  return h;
}

std::string CostModel::quality_text() const {
  std::ostringstream os;
  os << "confidence " << confidence_name(quality.confidence);
  if (quality.rounds > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ": %d rounds within %.2fx, cpu share %.2f", quality.rounds,
                  quality.spread, quality.cpu_share);
    os << buf;
  }
  if (!quality.note.empty()) os << "; " << quality.note;
  if (!quality.measured.empty()) os << "; measured " << quality.measured;
  return os.str();
}

std::string CostModel::describe() const {
  char hash[16];
  std::snprintf(hash, sizeof hash, "%08x", inputs_hash());
  if (!calibrated) return std::string("built-in defaults (never measured here), inputs ") + hash;
  return source + " (" + quality_text() + "), inputs " + hash;
}

}  // namespace lpsgd::comm
