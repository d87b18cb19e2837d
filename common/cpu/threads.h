/**
 * @file threads.h
 * @brief How many CPU threads a program may ask for, checked before it
 *        prints anything.
 *
 * OpenMP starts its threads at the first parallel loop, in the middle of a
 * run. When the system cannot create one (too little address space for
 * its stack, a limit on processes), libgomp prints "Thread creation
 * failed" and exits: after the program has printed text, with no file
 * written. So every program states a limit (THREADS_MAX, refused above in
 * one line by its option parser), and before the run threads_check()
 * starts as many threads as the run will use, the same way libgomp does
 * (default attributes: a stack of RLIMIT_STACK), waits until they all
 * exist, and lets them go. A machine that cannot start them refuses the
 * run in one line, before anything is printed.
 */
#ifndef KVLAB_THREADS_H
#define KVLAB_THREADS_H

#include "err.h"

/** The most threads --threads takes (more than any machine this course
 *  runs on has cores; results never depend on the count). */
#define THREADS_MAX 256

/**
 * Checks that @p n threads (this one and n - 1 more) can run at once on
 * this machine, by starting them.
 * @param n    the threads the run will use (ops_threads())
 * @param err  receives "cannot start N threads: ..." on failure
 * @return 0 when they could all be started, -1 otherwise
 */
int threads_check(int n, Err *err);

#endif
