# segtile_add_training_step(NAME MODEL <file.json> [PRECISION float32|float64] [TARGETS ...])
# Builds the untiled reference training step of a model into a static
# library NAME with header NAME.h (function NAME(...)), via the
# segtile_training_step generator. Programs link it without libHalide.
function(segtile_add_training_step NAME)
  cmake_parse_arguments(ARG "" "MODEL;PRECISION" "TARGETS" ${ARGN})
  if (NOT ARG_PRECISION)
    set(ARG_PRECISION float32)
  endif ()
  set(targets)
  if (ARG_TARGETS)
    set(targets TARGETS ${ARG_TARGETS})
  endif ()
  add_halide_library(${NAME} FROM segtile_generators
                     GENERATOR segtile_training_step
                     ${targets}
                     PARAMS model_file=${ARG_MODEL} precision=${ARG_PRECISION})
endfunction()
