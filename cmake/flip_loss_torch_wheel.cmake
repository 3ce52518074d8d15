# The CUDA libraries of a torch installed from PyPI, at link time and at run time.
#
# A CUDA wheel of torch brings its CUDA libraries as nvidia-* wheels (site-packages/nvidia/<name>/lib:
# libnccl.so.2, libcudart.so.13, libnvrtc.so.13, ...); libtorch_cuda.so finds them through its own
# RPATH ($ORIGIN/../../nvidia/<name>/lib). A program linked against torch does not:
#
# * Link time: GNU ld resolves libtorch_cuda.so's NEEDED entries from the -rpath-link directories,
#   then the program's -rpath directories (for a CUDA build, the CUDA toolkit's library directory),
#   then the default search path. An older NCCL there lacks symbols a newer torch needs, and the
#   link fails with "libtorch_cuda.so: undefined reference to `ncclCommResume'".
# * Run time: the program's own NEEDED CUDA libraries (libnvrtc and libcudart from
#   TORCH_LIBRARIES, libcudart of flip_ops' CUDA kernels) are looked up in its RUNPATH, which lists
#   the toolkit's directory and not the wheels'. The first copy of a soname loaded serves the whole
#   process, so torch would then run on the toolkit's libraries instead of those it was released
#   with.
#
# So every nvidia/*/lib directory next to torch goes on the `torch` target's link options, as
# -rpath-link (link time) and -rpath (run time), for everything that links torch: ld puts these
# -rpath entries before the ones CMake generates, and `cmake --install` keeps them when it swaps
# the build RPATH for the install RPATH. A program thus loads the same CUDA libraries as
# `import torch` does. A torch without nvidia-* wheels next to it (CPU-only, a LibTorch archive, a
# system package) is left as it is. CMAKE_SKIP_RPATH leaves out the -rpath part.
function(flip_loss_prefer_torch_wheel_libraries)
  if(NOT TARGET torch)
    return()
  endif()
  get_property(_flip_done TARGET torch PROPERTY FLIP_LOSS_WHEEL_LIBRARIES_LINKED SET)
  if(_flip_done)
    return()
  endif()
  set(_flip_location "")
  foreach(_flip_cfg IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION IMPORTED_LOCATION_RELWITHDEBINFO
                    IMPORTED_LOCATION_NOCONFIG)
    if(NOT _flip_location)
      get_target_property(_flip_location torch ${_flip_cfg})
    endif()
  endforeach()
  if(NOT _flip_location AND TORCH_LIBRARY)
    set(_flip_location "${TORCH_LIBRARY}")
  endif()
  if(NOT _flip_location)
    return()
  endif()
  get_filename_component(_flip_torch_lib "${_flip_location}" DIRECTORY)
  file(GLOB _flip_dirs LIST_DIRECTORIES true "${_flip_torch_lib}/../../nvidia/*/lib")
  set(_flip_wheel_dirs "")
  foreach(_flip_dir IN LISTS _flip_dirs)
    if(IS_DIRECTORY "${_flip_dir}")
      get_filename_component(_flip_dir "${_flip_dir}" REALPATH)
      list(APPEND _flip_wheel_dirs "${_flip_dir}")
    endif()
  endforeach()
  if(_flip_wheel_dirs)
    list(REMOVE_DUPLICATES _flip_wheel_dirs)
  endif()
  set(_flip_options "")
  foreach(_flip_dir IN LISTS _flip_wheel_dirs)
    list(APPEND _flip_options "LINKER:-rpath-link,${_flip_dir}")
    if(NOT CMAKE_SKIP_RPATH)
      list(APPEND _flip_options "LINKER:-rpath,${_flip_dir}")
    endif()
  endforeach()
  if(_flip_options)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS ${_flip_options})
    message(STATUS "flip_loss: CUDA libraries of torch's nvidia-* wheels first (link and RUNPATH): "
                   "${_flip_wheel_dirs}")
  endif()
  set_property(TARGET torch PROPERTY FLIP_LOSS_WHEEL_LIBRARIES_LINKED TRUE)
endfunction()
