/* share.h - which contexts of this process share one VkDevice (share.c): replicas
 * (exec_replicas.c) and pipeline stages (pipe_engine.c) listed on one physical device. */
#ifndef VKT_PARALLEL_SHARE_H
#define VKT_PARALLEL_SHARE_H

#include "gpu/gpu.h"

/* VKT_SHARE_DEVICE: 1 contexts on one physical device share one VkDevice (each its own
 * queue where the compute family has enough, else one under a lock: gpu.h), 0 never,
 * unset or empty (2): where the family has a queue for each of them (not lavapipe, which
 * has one: its contexts keep a device each, so they run concurrently). -1: a bad value. */
int share_mode(void);

/* A bad VKT_SHARE_DEVICE (share_mode -1): 1 and the message, naming the value and what
 * (e.g. "replicas", "stages") shares, into why[n]; else 0. */
int share_refuse(const char *what, char *why, size_t n);

/* The context that context i of n (on devices dev[0..n)) shares its VkDevice with: the
 * first before it on the same device (ctx(user, j) gives context j, made already), when
 * sharing is on for that device; NULL: a device of its own. */
vkt_context *share_pick(const uint32_t *dev, uint32_t n, uint32_t i,
                        vkt_context *(*ctx)(void *user, uint32_t j), void *user);

#endif
