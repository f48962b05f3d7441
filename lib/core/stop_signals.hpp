// Stop signals (SIGUSR1, SIGTERM), taken by one thread and never by the others.
//
// Why not an ordinary handler: a handler runs on whichever thread the kernel
// picks for a process-directed signal, and the kernel builds the handler's
// frame (several KiB with AVX-512 state) just below that thread's stack
// pointer. oneDNN 2.6's JIT GEMM kernels (behind its inner product, i.e.
// every Linear layer) move the stack pointer into a workspace they allocated
// on the heap while they run; a signal that lands there writes its frame over
// the heap below that workspace: malloc's chunk headers ("corrupted size vs.
// prev_size", "unaligned tcache chunk") or other live data (wrong GEMM
// results). So the stop signals are blocked in every thread, and one thread
// of their own waits for them with sigwait(): no signal frame is ever pushed
// onto a thread that computes.
//
// block() must run before any thread starts, so that they all inherit the
// blocked set: the lpsgd executable calls it from ELF preinit, before the
// libraries' constructors (OpenBLAS starts its thread pool in one), and take()
// first thing in main(). A thread made before block() (in a test program)
// does not block them; a handler that only passes the signal on to the taking
// thread (pthread_kill) runs there, and nowhere else.
#pragma once

namespace lpsgd::stop_signals {

enum class Policy {
  /// A stop signal ends the process as its default action would.
  Terminate,
  /// The first stop signal is a request (requested() returns it) for the
  /// program to act on at a safe point; a second one ends the process at
  /// once, with a line on stderr.
  Request,
  /// Every stop signal is counted (received()) and otherwise ignored: for a
  /// program on its way out (its last checkpoint written, or its error
  /// reported: a launcher then sends SIGTERM to the ranks still running,
  /// which must not add a line or change the exit status), and for tests.
  Ignore,
};

/// Blocks SIGUSR1 and SIGTERM in the calling thread (and so in the threads it
/// starts from now on). Async-signal-safe and free of static state: the
/// lpsgd executable calls it from ELF preinit, before any library's
/// constructor can start a thread.
void block();

/// Blocks SIGUSR1 and SIGTERM in the calling thread and starts the thread
/// that takes them, under `policy`. Once per process; later calls only set
/// the policy.
void take(Policy policy);

/// Changes the policy. Switching to Terminate after a stop signal has been
/// received ends the process by that signal now.
void set_policy(Policy policy);

/// The first stop signal received (SIGUSR1 or SIGTERM), 0 while none came.
int requested();

/// How many stop signals have been received.
int received();

/// True once take() has started the taking thread.
bool taken();

/// "SIGUSR1", "SIGTERM", or "a stop signal" for anything else.
const char* name(int sig);

}  // namespace lpsgd::stop_signals
