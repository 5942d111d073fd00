// segtile: command-line program. `segtile train` with no options runs the
// main job: marks_cnn on generated 2048x2048 images under a 256 MiB cap.
// Exit status: 0 done, 1 bad input (image, dataset, weights, options),
// 2 bad model file, 3 memory cap below the smallest feasible.
#include <cstdio>

#include "apps/commands.h"
#include "autoscheduler/planner.h"
#include "spec/model.h"

int main(int argc, char **argv) {
    CLI::App app{"segtile: train convolutional networks on images larger than memory, with exact gradients"};
    app.require_subcommand(1);
    auto train = segtile::add_train_command(app);
    auto plan = segtile::add_plan_command(app);
    auto predict = segtile::add_predict_command(app);
    CLI11_PARSE(app, argc, argv);
    try {
        for (segtile::Command *c : {train.get(), plan.get(), predict.get()})
            if (c->app()->parsed()) return c->run();
    } catch (const segtile::PlanError &e) {
        std::fprintf(stderr, "segtile: %s\n", e.what());
        return 3;
    } catch (const segtile::ModelError &e) {
        std::fprintf(stderr, "segtile: %s\n", e.what());
        return 2;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "segtile: %s\n", e.what());
        return 1;
    }
    return 0;
}
