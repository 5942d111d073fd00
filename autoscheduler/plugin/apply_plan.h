// Turns a plan into Halide schedule directives on the pipeline's Funcs
// (compute_root / compute_at, tiling, parallel tile loop, vectorisation)
// and returns the same schedule as C++ source for AutoSchedulerResults.
#pragma once

#include <string>

#include "Halide.h"
#include "autoscheduler/plugin/memory_model.h"
#include "autoscheduler/plugin/pipeline_graph.h"

namespace segtile::plugin {

std::string apply_plan(const PipelineGraph &graph, const Plan &plan);

}  // namespace segtile::plugin
