/*
 * ctrl.h - the layout of a model's control block, defined once and included by both C
 * (engine/graph: the host writes it before every run; engine/kernels: the views kernels
 * take) and GLSL (the shaders that read it at run time, so a recorded command buffer
 * needs no change per step or per micro-batch). Indices are 4-byte elements. A kernel is
 * given a view of the block at CTRL_STEP and finds the other words relative to it.
 */
#ifndef VKT_CTRL_H
#define VKT_CTRL_H

#define CTRL_STEP 0 /* uint64 step: low word, then high (dropout keys) */
#define CTRL_ONE 2  /* 1.0f: the gradient of the loss with respect to itself */
#define CTRL_LOSS 3 /* the loss copied out, when the arena is not host-visible */
#define CTRL_ROW0 4 /* uint32: the global batch row of this run's row 0 (dropout keys) */
#define CTRL_ELEMS 5

/* The words a kernel reading the step and the row base needs from its view's start. */
#define CTRL_KEY_WORDS (CTRL_ROW0 - CTRL_STEP + 1)

#endif
