# Link-time search path for the CUDA libraries of a torch installed from PyPI.
#
# The torch wheel's libtorch_cuda.so needs libnccl.so.2, libcudart.so.13, ... of the nvidia-* wheels
# torch was installed with (site-packages/nvidia/<name>/lib), and finds them at run time through
# its own RPATH ($ORIGIN/../../nvidia/<name>/lib). At link time GNU ld looks for a shared library's
# dependencies in the program's -rpath directories first, which for a CUDA build hold the CUDA
# toolkit's library directory: an older NCCL there (or on the default search path) lacks symbols a
# newer torch needs, and the link fails with "libtorch_cuda.so: undefined reference to
# `ncclCommResume'". -rpath-link directories come before all of those, so the wheels' directories
# are given as -rpath-link on the `torch` target, for everything that links it. Nothing changes for
# a torch that is not a wheel (no site-packages/nvidia next to it).
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
  set(_flip_options "")
  foreach(_flip_dir IN LISTS _flip_dirs)
    if(IS_DIRECTORY "${_flip_dir}")
      get_filename_component(_flip_dir "${_flip_dir}" REALPATH)
      list(APPEND _flip_options "LINKER:-rpath-link,${_flip_dir}")
    endif()
  endforeach()
  if(_flip_options)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS ${_flip_options})
  endif()
  set_property(TARGET torch PROPERTY FLIP_LOSS_WHEEL_LIBRARIES_LINKED TRUE)
endfunction()
