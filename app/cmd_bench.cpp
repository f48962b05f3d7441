// lpsgd bench: broadcast / reduce / allreduce benchmark in the style of
// nccl-tests. Algorithms given as a list run in one process, each in phases of
// its own (a warm-up, then timed iterations back to back), the phases repeated
// in up to three rounds so that drift hits them alike. Per iteration the time
// is the slowest rank's; a row reports the median over iterations, algbw =
// bytes / time and busbw = algbw × 2(P−1)/P for allreduce (× 1 for bcast and
// reduce), so numbers compare directly with NCCL's.
//
// Times are read with MPI_Wtime, so the same code built with smpicxx
// (lpsgd-bench-smpi) reports simulated time under SimGrid; there the device is
// an SmpiDevice (reductions charged γ per byte, optionally shared buffers).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "comm/calibrate.hpp"
#include "comm/chain.hpp"
#include "comm/communicator.hpp"
#include "core/cli.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "lpsgd/config.hpp"
#if LPSGD_SMPI
#include "device/smpi/smpi_device.hpp"
#endif

namespace lpsgd::app {
namespace {

using namespace comm;

struct Row {
  std::string op, algo, dtype;
  uint64_t bytes = 0, count = 0, block = 0;
  int root = 0, ranks = 0;
  double time_us = 0, algbw = 0, busbw = 0, predicted_us = 0;
  bool calibrated = false;  ///< predicted_us from a measured model
  int64_t wrong = -1;  ///< -1: not checked
};

// Exact inputs: small integers that differ by rank, so every sum is exact.
template <class T>
T input_value(size_t i, int rank) {
  return static_cast<T>(static_cast<acc_t<T>>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13) % 17) - 8));
}

template <class T>
void fill_input(T* p, size_t n, int rank) {
  for (size_t i = 0; i < n; ++i) p[i] = input_value<T>(i, rank);
}

template <class T>
uint64_t count_wrong(const T* out, size_t n, CollKind kind, int root, int P, int rank) {
  if (kind == CollKind::Reduce && rank != root) return 0;
  uint64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    T expect = T(0);
    if (kind == CollKind::Bcast) {
      expect = input_value<T>(i, root);
    } else {
      for (int r = 0; r < P; ++r) expect = static_cast<T>(expect + input_value<T>(i, r));
    }
    wrong += out[i] != expect;
  }
  return wrong;
}

// bf16 and fp16 sums round once per addition: a result is right within
// sum16_gamma(P - 1) * sum_r |x_r| of the exact sum (docs/precision.md; these
// integer inputs sum exactly up to P = 32 in bf16, 256 in fp16), a broadcast
// bit for bit.
template <class H>
uint64_t count_wrong16(const H* out, size_t n, CollKind kind, int root, int P, int rank) {
  if (kind == CollKind::Reduce && rank != root) return 0;
  const double gamma = sum16_gamma(dtype_of<H>::value, P - 1);
  uint64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    if (kind == CollKind::Bcast) {
      wrong += out[i].bits != input_value<H>(i, root).bits;
      continue;
    }
    const double got = static_cast<float>(out[i]);
    double sum = 0, abs_sum = 0;
    for (int r = 0; r < P; ++r) {
      const double x = static_cast<float>(input_value<H>(i, r));
      sum += x;
      abs_sum += std::fabs(x);
    }
    wrong += !(std::fabs(got - sum) <= gamma * abs_sum);
  }
  return wrong;
}
template <>
uint64_t count_wrong(const bfloat16* out, size_t n, CollKind kind, int root, int P, int rank) {
  return count_wrong16(out, n, kind, root, P, rank);
}
template <>
uint64_t count_wrong(const float16* out, size_t n, CollKind kind, int root, int P, int rank) {
  return count_wrong16(out, n, kind, root, P, rank);
}

std::string json_row(const Row& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"op\": \"%s\", \"algo\": \"%s\", \"dtype\": \"%s\", \"bytes\": %llu, "
                "\"count\": %llu, \"root\": %d, \"ranks\": %d, \"block\": %llu, "
                "\"time_us\": %.3f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, "
                "\"predicted_us\": %s, \"calibrated\": %s, \"wrong\": %lld}",
                r.op.c_str(), r.algo.c_str(), r.dtype.c_str(),
                static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.count),
                r.root, r.ranks, static_cast<unsigned long long>(r.block), r.time_us, r.algbw,
                r.busbw,
                std::isfinite(r.predicted_us) ? std::to_string(r.predicted_us).c_str() : "null",
                r.calibrated ? "true" : "false", static_cast<long long>(r.wrong));
  return buf;
}

}  // namespace

int run_bench(int argc, char** argv) {
  namespace po = cli::po;
  std::string ops_s, algos_s, min_s, max_s, sizes_s, dtype_s, block_s, links_s, json_path, csv_path, calib,
      device_s;
  double factor = 4, timeout = 300;
  int iters = 20, warmup = 5, root = 0, window = 4, rpn = 0;
  bool check = false, do_calibrate = false, shared_buffers = false, floor = false;
  po::options_description desc("lpsgd bench options");
  desc.add_options()
    ("op", po::value(&ops_s)->default_value("allreduce"), "collectives: bcast,reduce,allreduce")
    ("algo", po::value(&algos_s)->default_value("lp,mpi"), "algorithms: lp,tree,mst,be,ring,mpi,auto")
    ("minbytes,b", po::value(&min_s)->default_value("1M"), "smallest message (K/M/G suffixes)")
    ("maxbytes,e", po::value(&max_s)->default_value("64M"), "largest message")
    ("stepfactor,f", cli::value_with_default(&factor), "size multiplier between rows")
    ("sizes", po::value(&sizes_s), "message sizes as a list (e.g. 64K,1M,16M), instead of -b/-e/-f")
    ("iters,n", po::value(&iters)->default_value(20), "timed iterations per row")
    ("warmup,w", po::value(&warmup)->default_value(5), "untimed iterations per row, spread over its phases (each phase at least one)")
    ("root", po::value(&root)->default_value(0), "root (chain position) for bcast and reduce")
    ("dtype", po::value(&dtype_s)->default_value("float"), "float, double, int32, bf16 or fp16")
    ("block", po::value(&block_s)->default_value("auto"), "LP block: bytes or auto (cost model)")
    ("window", po::value(&window)->default_value(4), "LP blocks in flight per link (W)")
    ("links", po::value(&links_s)->default_value("auto"), "auto (peer links in a node) or mpi")
    ("device", po::value(&device_s)->default_value("cpu"), "where the buffers live: cpu or cuda (GPU local rank % count)")
    ("ranks-per-node", po::value(&rpn)->default_value(0), "split ranks into pretend nodes of N")
    ("comm-timeout", cli::value_with_default(&timeout), "seconds without progress = error")
    ("check", po::bool_switch(&check), "validate every result and count wrong elements")
    ("floor", po::bool_switch(&floor),
     "also time the memory floor: every rank copies its input to its output (algo 'copy'), "
     "in phases beside the algorithms'")
    ("shared-buffers", po::bool_switch(&shared_buffers),
     "SimGrid build: all ranks share one copy of each buffer (SMPI_SHARED_MALLOC); no --check")
    ("json", po::value(&json_path), "write one JSON object per row to FILE")
    ("csv", po::value(&csv_path), "write the rows as CSV to FILE")
    ("calibrate", po::bool_switch(&do_calibrate), "measure alpha, beta, gamma; write the calibration file")
    ("calibration", po::value(&calib), "calibration file to read/write (default ~/.cache/lpsgd/calibration-HOST.ini on one machine, calibration-HOST+N-HASH.ini for N machines: one per cluster)");
  po::variables_map vm;
  if (!cli::parse(argc, argv, desc, vm, "usage: lpsgd bench [--op LIST] [--algo LIST] [-b MIN -e MAX -f F] [options]"))
    return 0;

  int world = 1, wrank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  cli::require_range("iters", iters, 1, 1000000);
  cli::require_range("warmup", warmup, 0, 1000000);
  cli::require_range("window", window, 1, 16);
  cli::require_range("root", root, 0, world - 1);
  if (!(factor > 1)) LPSGD_USAGE_ERROR("--stepfactor must be > 1, got " << factor);
  uint64_t min_bytes = cli::parse_bytes(min_s), max_bytes = cli::parse_bytes(max_s);
  if (min_bytes > max_bytes) LPSGD_USAGE_ERROR("--minbytes " << min_s << " exceeds --maxbytes " << max_s);
  std::vector<uint64_t> sizes;
  if (!sizes_s.empty()) {
    for (auto& s : cli::split_list(sizes_s)) sizes.push_back(cli::parse_bytes(s));
    if (sizes.empty()) LPSGD_USAGE_ERROR("--sizes needs at least one size");
    std::sort(sizes.begin(), sizes.end());
    min_bytes = sizes.front();
    max_bytes = sizes.back();
  } else {
    for (uint64_t b = min_bytes;;) {
      sizes.push_back(b);
      if (b >= max_bytes) break;
      b = std::min<uint64_t>(max_bytes, static_cast<uint64_t>(std::ceil(static_cast<double>(b) * factor)));
    }
  }
  const DType dtype = parse_dtype(dtype_s);
  const size_t esize = dtype_size(dtype);
  const size_t block = block_s == "auto" ? 0 : cli::parse_bytes(block_s);
  std::vector<CollKind> ops;
  for (auto& s : cli::split_list(ops_s)) ops.push_back(parse_coll(s));
  std::vector<Algo> algos;
  for (auto& s : cli::split_list(algos_s)) algos.push_back(parse_algo(s));
  if (ops.empty() || algos.empty()) LPSGD_USAGE_ERROR("--op and --algo need at least one entry");
  if (shared_buffers && !build::smpi)
    LPSGD_USAGE_ERROR("--shared-buffers needs the SimGrid build (jobs/smpi/build.sh: lpsgd-bench-smpi)");
  if (shared_buffers && check)
    LPSGD_USAGE_ERROR("--check needs real buffers: shared buffers hold no data to validate; "
                      "drop --shared-buffers or --check");
  if (build::smpi && floor)
    LPSGD_USAGE_ERROR("--floor times real memory; simulated copies cost nothing");
  if (build::smpi && do_calibrate)
    LPSGD_USAGE_ERROR("--calibrate measures a real machine; a simulated platform's alpha and beta "
                      "come from its XML (jobs/smpi/sweep.sh writes the calibration file)");

#if LPSGD_SMPI
  auto smpi_dev = std::make_unique<SmpiDevice>(shared_buffers);
  SmpiDevice& sim = *smpi_dev;
  std::unique_ptr<Device> dev = std::move(smpi_dev);
#else
  if (do_calibrate && device_s != "cpu")
    LPSGD_USAGE_ERROR("--calibrate measures the CPU's links; run it with --device cpu");
  const DeviceKind dev_kind = parse_device_kind(device_s);
  auto dev = make_device(dev_kind, node_local_rank(MPI_COMM_WORLD));
#endif

  if (do_calibrate) {
    const double t0 = now_s();
    CostModel m = calibrate(MPI_COMM_WORLD, *dev, rpn, 50, window);
    const double took = now_s() - t0;
    const std::string path =
        calib.empty() ? CostModel::default_path(Chain(MPI_COMM_WORLD, LinksMode::Auto, rpn).hosts())
                      : calib;
    // The machine's own file (no --calibration) is what every job's auto
    // reads: a measurement that is not sure of itself does not replace a
    // sure one there (calibrate.hpp, prefer_fresh). A file named is written.
    CostModel old = calib.empty() && wrank == 0 ? CostModel::load_if_present(path) : CostModel{};
    int keep_old = 0;
    std::string why;
    if (wrank == 0 && calib.empty()) keep_old = prefer_fresh(old, m, &why) ? 0 : 1;
    if (wrank == 0) {
      m.calibrated = true;
      m.source = path;
      if (!keep_old) m.save(path);
      std::printf("# calibration %s %s (measured in %.2f s)\n#  alpha_shm %.3g s  beta_shm %.3g s/B (%.2f GB/s)\n"
                  "#  alpha_mpi %.3g s  beta_mpi %.3g s/B (%.2f GB/s), %s\n"
                  "#  gamma %.3g s/B (%.2f GB/s)\n#  %s\n",
                  keep_old ? "not written to" : "written to", path.c_str(), took, m.alpha_shm, m.beta_shm,
                  1e-9 / m.beta_shm, m.alpha_mpi, m.beta_mpi, 1e-9 / m.beta_mpi,
                  m.mpi_neighbour_links ? "a link of its own to each chain neighbour"
                                        : "one NIC per node (a switch)",
                  m.gamma, 1e-9 / m.gamma, m.describe().c_str());
      if (keep_old) std::printf("# kept %s: %s\n", old.describe().c_str(), why.c_str());
    }
    return 0;
  }

  CommOptions o;
  o.links = parse_links(links_s);
  o.ranks_per_node = rpn;
  o.window = window;
  o.timeout_s = timeout;
  o.calibration_file = calib;
  // auto chooses by the model: measure it first where it was never calibrated.
  o.calibrate_if_missing = std::find(algos.begin(), algos.end(), Algo::Auto) != algos.end();
  o.slot_bytes = std::max<size_t>(block ? block : 0, 4u << 20);
  // Collectives run on the device's communication queue, as in training; a
  // timed iteration ends when that queue has finished.
  Device& cq = dev->comm_queue();
  Communicator comm(MPI_COMM_WORLD, cq, o);
  const int P = comm.size(), me = comm.rank();
#if LPSGD_SMPI
  sim.set_reduce_cost(comm.model().gamma);  // simulated reductions cost what the model says
#endif

  // Every buffer is allocated and touched once, before anything is timed.
  const size_t max_count = std::max<size_t>(1, max_bytes / esize);
  // Real buffers come from the communicator's shared memory, which peer links
  // read in place (as the trainer's gradients do); simulated ones are shared
  // by all ranks (SMPI_SHARED_MALLOC, through the device).
  const size_t buf_bytes = max_count * esize;
  DeviceBuffer in_sim, out_sim;
  void* in_data = nullptr;
  void* out_data = nullptr;
  if (shared_buffers) {
    in_sim = DeviceBuffer(cq, buf_bytes);
    out_sim = DeviceBuffer(cq, buf_bytes);
    in_data = in_sim.data();
    out_data = out_sim.data();
  } else {
    in_data = comm.alloc_shared(buf_bytes);
    out_data = comm.alloc_shared(buf_bytes);
    cq.zero(out_data, buf_bytes);
  }
  if (std::any_of(algos.begin(), algos.end(), [](Algo a) { return a != Algo::Lp; }))
    comm.reserve_scratch(max_count * esize);  // LP needs none
  // Inputs are made and results checked here; shared (simulated) buffers hold
  // no real data, so they get neither.
  std::vector<char> host(shared_buffers ? 0 : max_count * esize);
  if (!shared_buffers) {
    dispatch_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      fill_input(reinterpret_cast<T*>(host.data()), max_count, me);
    });
    cq.copy_from_host(in_data, host.data(), host.size());
  }

  if (me == 0) {
    std::printf("# lpsgd bench: P=%d chain %s, links %s, window %d, device %s\n", P,
                comm.chain().describe().c_str(),
                comm.chain().links() == LinksMode::Mpi ? "mpi" : "auto", window,
                dev->name().c_str());
    if (comm.model().calibrated)
      std::printf("# cost model: %s\n", comm.model().describe().c_str());
    else
      std::printf("# cost model: built-in defaults, not this machine's: predictions marked ~ are rough "
                  "(lpsgd bench --calibrate measures it)\n");
    std::printf("# %10s %12s %6s %9s %5s %5s %8s %12s %8s %8s %8s %12s\n", "size", "count", "type",
                "op", "root", "algo", "block", "time(us)", "algbw", "busbw", "#wrong", "pred(us)");
  }
  std::vector<Row> rows;
  for (const uint64_t bytes : sizes) {
    const size_t count = bytes / esize;
    for (CollKind kind : ops) {
      const int r = kind == CollKind::Allreduce ? 0 : root;
      std::vector<std::vector<double>> times(algos.size());
      std::vector<int64_t> wrong(algos.size(), -1);
      std::vector<size_t> blocks(algos.size(), 0);
      std::vector<double> copy_times;
      // All ranks start together; the time is the slowest rank's, until its
      // communication queue has finished (simulated time under SMPI).
      auto timed = [&](auto&& work) {
        MPI_Barrier(comm.ctrl_comm());
        const double t0 = MPI_Wtime();
        work();
        cq.synchronize();
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm.ctrl_comm());
        return dt;
      };
      // Phases: each (algorithm or copy) runs its iterations back to back after
      // a warm-up of its own, so what one leaves behind (the MPI library's
      // allreduce maps and unmaps a temporary of the message's size on every
      // call) is absorbed by the next one's warm-up, not timed. The phases
      // repeat in `rounds` rounds, so that drift still hits every row alike.
      const int rounds = std::max(1, std::min(iters, 3));
      const int phase_warmup = warmup > 0 ? (warmup + rounds - 1) / rounds : 0;
      const size_t n_phases = algos.size() + (floor ? 1 : 0);
      for (int round = 0; round < rounds; ++round) {
        const int timed_iters = iters / rounds + (round < iters % rounds ? 1 : 0);
        const bool last_round = round == rounds - 1;
        for (size_t ph = 0; ph < n_phases; ++ph) {
          if (floor && ph == 0) {
            // The least any rank's part of a collective on one node costs: read
            // its n bytes once and write n bytes once, all ranks at the same time.
            for (int it = 0; it < phase_warmup + timed_iters; ++it) {
              // The best copy the device has: past the caches where the
              // algorithms' outputs go past them too (Device::uncached_min_bytes).
              const double dt = timed([&] {
                const size_t n = count * esize;
                if (n >= cq.uncached_min_bytes()) cq.copy_uncached(out_data, in_data, n);
                else cq.copy(out_data, in_data, n);
              });
              if (it >= phase_warmup) copy_times.push_back(dt);
            }
            continue;
          }
          const size_t a = ph - (floor ? 1 : 0);
          if (!supports(algos[a], kind)) continue;
          CollArgs args{kind, in_data, out_data, count, dtype, ReduceOp::Sum, r};
          for (int it = 0; it < phase_warmup + timed_iters; ++it) {
            auto h = comm.create(algos[a], args, block);
            blocks[a] = h->block_bytes();
            const double dt = timed([&] {
              h->start();
              h->wait();
            });
            if (it >= phase_warmup) times[a].push_back(dt);
            if (h->variant() == "halves") blocks[a] = 0;  // two ranks doing half each: no blocks
            if (check && last_round && it == phase_warmup + timed_iters - 1) {
              cq.copy_to_host(host.data(), out_data, count * esize);
              uint64_t w = dispatch_dtype(dtype, [&](auto tag) {
                using T = decltype(tag);
                return count_wrong(reinterpret_cast<const T*>(host.data()), count, kind, r, P, me);
              });
              MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_UINT64_T, MPI_SUM, comm.ctrl_comm());
              wrong[a] = static_cast<int64_t>(w);
            }
          }
        }
      }
      const size_t n_rows = algos.size() + (floor ? 1 : 0);
      for (size_t a = 0; a < n_rows; ++a) {
        const bool copy_row = a == algos.size();
        if (!copy_row && !supports(algos[a], kind)) continue;
        auto& ts = copy_row ? copy_times : times[a];
        std::sort(ts.begin(), ts.end());
        const double med = ts.size() % 2 ? ts[ts.size() / 2]
                                         : 0.5 * (ts[ts.size() / 2 - 1] + ts[ts.size() / 2]);
        Row row;
        row.op = coll_name(kind);
        row.dtype = dtype_name(dtype);
        row.bytes = count * esize;
        row.count = count;
        row.root = r;
        row.ranks = P;
        row.block = copy_row ? 0 : blocks[a];
        row.time_us = med * 1e6;
        row.algbw = med > 0 ? static_cast<double>(row.bytes) / med / 1e9 : 0;
        row.busbw = row.algbw * (kind == CollKind::Allreduce && !copy_row ? 2.0 * (P - 1) / P : 1.0);
        if (copy_row) {
          row.algo = "copy";
          row.predicted_us = std::numeric_limits<double>::quiet_NaN();
        } else {
          const auto [resolved, rb] =
              comm.resolve(algos[a], {kind, nullptr, nullptr, count, dtype, ReduceOp::Sum, r}, block);
          row.algo = algos[a] == Algo::Auto ? std::string("auto:") + algo_name(resolved)
                                            : algo_name(algos[a]);
          row.predicted_us = 1e6 * comm.model().predict(resolved, kind, static_cast<double>(row.bytes), P, r,
                                                        static_cast<double>(rb), LinkMix::of(comm.chain()));
        }
        row.wrong = copy_row ? -1 : wrong[a];
        row.calibrated = comm.model().calibrated;
        rows.push_back(row);
        if (me == 0) {
          char pred[32];
          if (std::isfinite(row.predicted_us))
            std::snprintf(pred, sizeof pred, "%s%11.1f", comm.model().calibrated ? " " : "~",
                          row.predicted_us);
          else std::snprintf(pred, sizeof pred, "%12s", "n/a");
          std::printf("  %10s %12llu %6s %9s %5d %5s %8s %12.1f %8.2f %8.2f %8s %s\n",
                      cli::format_bytes(row.bytes).c_str(), static_cast<unsigned long long>(count),
                      row.dtype.c_str(), row.op.c_str(), r, row.algo.c_str(),
                      row.block ? cli::format_bytes(row.block).c_str() : "-", row.time_us,
                      row.algbw, row.busbw, row.wrong >= 0 ? std::to_string(row.wrong).c_str() : "-", pred);
          std::fflush(stdout);
        }
      }
    }
  }

  uint64_t total_wrong = 0;
  for (auto& r : rows) total_wrong += r.wrong > 0 ? static_cast<uint64_t>(r.wrong) : 0;
  if (me == 0) {
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      if (!f) LPSGD_THROW("cannot write '" << json_path << "'");
      for (auto& r : rows) f << json_row(r) << "\n";
    }
    if (!csv_path.empty()) {
      std::ofstream f(csv_path);
      if (!f) LPSGD_THROW("cannot write '" << csv_path << "'");
      f << "op,algo,dtype,bytes,count,root,ranks,block,time_us,algbw_gbs,busbw_gbs,predicted_us,wrong\n";
      for (auto& r : rows)
        f << r.op << "," << r.algo << "," << r.dtype << "," << r.bytes << "," << r.count << ","
          << r.root << "," << r.ranks << "," << r.block << "," << r.time_us << "," << r.algbw << ","
          << r.busbw << "," << (std::isfinite(r.predicted_us) ? std::to_string(r.predicted_us) : "") << ","
          << r.wrong << "\n";
    }
    if (check) std::printf("# wrong elements in total: %llu\n", static_cast<unsigned long long>(total_wrong));
  }
  return total_wrong ? 1 : 0;
}

}  // namespace lpsgd::app
