// segtile: command-line program. `segtile train` with no options runs the
// main job: marks_cnn on generated 2048x2048 images under a 256 MiB cap.
// Exit status (apps/error_report.h, docs/program.md): 0 done, 1 bad input,
// 2 bad model file, 3 memory cap below the smallest feasible, 4 training
// diverged, 70 internal error.
#include <stdexcept>
#include <string>

#include "apps/commands.h"
#include "apps/error_report.h"
#include "spec/errors.h"

int main(int argc, char **argv) {
    segtile::install_crash_handlers();
    try {
        CLI::App app{"segtile: train convolutional networks on images larger than memory, with exact gradients"};
        app.require_subcommand(1);
        auto train = segtile::add_train_command(app);
        auto plan = segtile::add_plan_command(app);
        auto predict = segtile::add_predict_command(app);
        // CLI11 reports a misspelt subcommand as "A subcommand is required".
        if (argc > 1 && argv[1][0] != '-') {
            try {
                app.get_subcommand(argv[1]);
            } catch (const CLI::OptionNotFound &) {
                throw segtile::UsageError(std::string("unknown command '") + argv[1] +
                                            "': use train, plan or predict (see segtile --help)");
            }
        }
        try {
            app.parse(argc, argv);
        } catch (const CLI::Success &e) {  // --help
            return app.exit(e);
        }
        for (segtile::Command *c : {train.get(), plan.get(), predict.get()})
            if (c->app()->parsed()) return c->run();
    } catch (...) {
        return segtile::report_failure(std::current_exception());
    }
    return segtile::kExitOk;
}
