// The subcommands of the `segtile` program, one file each: each registers
// its options on the app and runs when parsed.
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

namespace segtile {

class Command {
public:
    virtual ~Command() = default;
    virtual CLI::App *app() const = 0;
    // Runs the parsed command; returns the exit status. Errors a user can
    // cause are thrown (main maps them to messages and exit codes).
    virtual int run() = 0;
};

std::unique_ptr<Command> add_train_command(CLI::App &app);
std::unique_ptr<Command> add_plan_command(CLI::App &app);
std::unique_ptr<Command> add_predict_command(CLI::App &app);

}  // namespace segtile
