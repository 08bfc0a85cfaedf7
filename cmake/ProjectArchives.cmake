# moec_collect_project_archives(target out): this project's static
# libraries that `target` links, recursively (imported targets and
# interface libraries left out), appended to the list variable `out`. The
# static links (StaticMoec.cmake, StaticEmulatedHip.cmake) name them by
# path next to the MLIR and LLVM archives.
include_guard(GLOBAL)

function(moec_collect_project_archives target out)
  set(seen ${${out}})
  get_target_property(libs ${target} LINK_LIBRARIES)
  if(NOT libs)
    return()
  endif()
  foreach(lib IN LISTS libs)
    if(NOT TARGET ${lib})
      continue()
    endif()
    get_target_property(imported ${lib} IMPORTED)
    get_target_property(type ${lib} TYPE)
    if(imported OR NOT type STREQUAL "STATIC_LIBRARY" OR lib IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${lib})
    moec_collect_project_archives(${lib} seen)
  endforeach()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

