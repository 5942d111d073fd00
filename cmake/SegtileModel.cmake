# segtile_add_training_step(NAME MODEL <file.json> [PRECISION float32|float64]
#                           [TARGETS ...] [USE_RUNTIME <runtime>])
# Builds the untiled reference training step of a model into a static
# library NAME with header NAME.h (NAME(), NAME_argv(), NAME_metadata()),
# via the segtile_training_step generator. Kernels carry a user_context (the
# runtime's KernelContext: memory ledger, error text). Programs link the
# library and segtile_runtime, not libHalide.
function(segtile_add_training_step NAME)
  cmake_parse_arguments(ARG "" "MODEL;PRECISION;USE_RUNTIME" "TARGETS" ${ARGN})
  if (NOT ARG_PRECISION)
    set(ARG_PRECISION float32)
  endif ()
  set(extra)
  if (ARG_TARGETS)
    list(APPEND extra TARGETS ${ARG_TARGETS})
  endif ()
  if (ARG_USE_RUNTIME)
    list(APPEND extra USE_RUNTIME ${ARG_USE_RUNTIME})
  endif ()
  get_filename_component(model "${ARG_MODEL}" ABSOLUTE)
  add_halide_library(${NAME} FROM segtile_generators
                     GENERATOR segtile_kernel
                     FEATURES user_context
                     DEPENDS "${model}"
                     ${extra}
                     PARAMS model_file=${model} untiled=true kind=head precision=${ARG_PRECISION})
endfunction()
