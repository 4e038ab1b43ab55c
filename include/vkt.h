/*
 * vkt.h - the public contract of vktrain, a neural-network training engine whose
 * kernels are GLSL compute shaders run through Vulkan. The one include for programs:
 * it includes the six parts of the contract, each a header readable alone for the
 * reader who needs only that part (README, "The public headers"):
 *
 *   vkt/base.h         the conventions, VKT_API and the version, status codes and
 *                      messages, element types, the instance and its devices, contexts
 *   vkt/compute.h      buffers and views, streams, the kernels (GEMM, elementwise,
 *                      binary, reductions, softmax, fill, copy)
 *   vkt/graph.h        graphs: tensors, leaves, ops, layers, stages; models (a graph
 *                      compiled for a context)
 *   vkt/data.h         data sets (MNIST, CSV, arrays), token files, character
 *                      corpora, loaders
 *   vkt/training.h     optimizers, trainers, pipelines and automatic splits,
 *                      summaries, checkpoints, interruption, import
 *   vkt/distributed.h  the world: one job across processes (MPI)
 *
 * Each part includes the parts it builds on (compute, data and distributed: base;
 * graph: compute; training: graph, data and distributed) and C standard headers, nothing else.
 */
#ifndef VKT_H
#define VKT_H

#include "vkt/base.h"
#include "vkt/compute.h"
#include "vkt/graph.h"
#include "vkt/data.h"
#include "vkt/training.h"
#include "vkt/distributed.h"

#endif /* VKT_H */
