// CHECK for the framework-free check programs that tests compile with g++ (check_programs.py):
// names the first condition that fails and ends the program with exit code 1.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                            \
  do {                                                         \
    if (!(cond)) {                                             \
      std::printf("FAILED at line %d: %s\n", __LINE__, #cond); \
      std::exit(1);                                            \
    }                                                          \
  } while (0)
