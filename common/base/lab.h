/**
 * @file lab.h
 * @brief Support for lab exercises: a clear message from unfinished code.
 *
 * The exercise files in exercises/ are the answers with their heart cut
 * out. What is left must compile and fail the lab tests cleanly, so every
 * cut-out region ends in LAB_TODO(), which tells the student, once per
 * function, what is missing.
 */
#ifndef KVLAB_LAB_H
#define KVLAB_LAB_H

/**
 * Prints "lab: TODO in FUNCTION: WHAT" on stderr the first time it is
 * reached for a given function (later calls are silent).
 * @param function  the function left unfinished (__func__)
 * @param what      what the student still has to write
 */
void lab_todo(const char *function, const char *what);

/** Marks an unfinished exercise region; see lab_todo(). */
#define LAB_TODO(what) lab_todo(__func__, (what))

#endif
