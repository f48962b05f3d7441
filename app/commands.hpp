// The subcommands of the lpsgd executable; one file each.
#pragma once

namespace lpsgd::app {

// Each gets argv with argv[0] = the subcommand name and returns the exit code.
int run_train(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_data(int argc, char** argv);
int run_ckpt(int argc, char** argv);
int run_eval(int argc, char** argv);
int run_export(int argc, char** argv);

/// Message for a subcommand whose issue has not landed yet (exit code 2).
int not_built(const char* what);

}  // namespace lpsgd::app
