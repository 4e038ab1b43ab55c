/* The transport of world_threads.h: the ranks are threads sharing a hub (one mutex, one
 * condition variable signalled when a collective completes). Every function of
 * engine/parallel/world.h is here, with the checks and messages of world_mpi.c where
 * they matter to the engine. */
#include "world_threads.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parallel/world.h"
#include "platform/platform.h"

#define DEFAULT_TIMEOUT 60.0
#define DEFAULT_POLL_MAX_US 200u

typedef enum coll_kind { C_REDUCE, C_BCAST, C_GATHER, C_ALLGATHERV, C_BARRIER } coll_kind;
typedef enum elem_type { E_F32, E_U64, E_F64 } elem_type;

static const char *const kind_name[] = {"allreduce", "broadcast", "gather", "allgatherv",
                                        "barrier"};
static const uint64_t elem_size[] = {sizeof(float), sizeof(uint64_t), sizeof(double)};

/* The seq-th collective of the job, as each rank reaches it. */
typedef struct coll {
    uint64_t seq;
    coll_kind kind;
    elem_type type;
    world_op op;
    uint64_t n;               /* elements (allreduce), bytes (broadcast, gather) */
    uint32_t arrived, held;   /* ranks that deposited; their requests not yet freed */
    int done;
    char error[256];          /* the ranks disagree: every rank's request fails */
    uint8_t *here;            /* [size] rank r arrived */
    void **buf;               /* [size] rank r's buffer (gather: recv, the chief's) */
    const void **send;        /* [size] gather: rank r's send */
    uint64_t *layout;         /* allgatherv: counts [size] then displs [size] */
    struct coll *next;
} coll;

/* A message in a mailbox, copied at the send. */
typedef struct msg {
    struct msg *next;
    uint32_t src;
    int tag;
    uint64_t bytes;
    unsigned char data[];
} msg;

typedef struct hub {
    pthread_mutex_t lock;
    pthread_cond_t done;      /* a collective completed */
    uint32_t size, refs;      /* ranks; worlds not yet finalized */
    coll *colls;              /* in flight, or waiting for a rank to free its request */
    msg **head, **tail;       /* [size] rank r's mailbox, oldest first */
} hub;

struct world_impl {
    hub *hub;
    struct world_req *posted;  /* world_irecv's receives not yet matched, in posting order */
    uint64_t seq;             /* collectives this rank started */
    uint64_t piece_bytes;     /* world_set_max_piece: kept, no piece limit applies here */
};

struct world_req {
    coll *c;                  /* NULL: a send, complete when made, or a receive: */
    char what[96];
    uint64_t bytes;
    int recv;                 /* world_irecv: complete when a message of tag from src */
    uint32_t src;             /*   has been taken from this rank's mailbox into buf */
    int tag;
    void *buf;
    int matched;              /*   1 done, -1 a size mismatch (error) */
    char error[160];
    struct world_req *next_posted;
};

/* ---- the hub ------------------------------------------------------------------- */

static void coll_free(coll *c)
{
    if (!c)
        return;
    free(c->here);
    free(c->buf);
    free(c->send);
    free(c->layout);
    free(c);
}

static void hub_free(hub *h)
{
    if (!h)
        return;
    while (h->colls) { /* requests left in flight by a timeout */
        coll *c = h->colls;
        h->colls = c->next;
        coll_free(c);
    }
    for (uint32_t r = 0; h->head && r < h->size; r++)
        while (h->head[r]) {
            msg *m = h->head[r];
            h->head[r] = m->next;
            free(m);
        }
    free(h->head);
    free(h->tail);
    pthread_cond_destroy(&h->done);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

static hub *hub_new(uint32_t size)
{
    hub *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines immune to clock changes */
    int cond_ok = pthread_cond_init(&h->done, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!cond_ok) {
        free(h);
        return NULL;
    }
    pthread_mutex_init(&h->lock, NULL);
    h->size = size;
    h->head = calloc(size, sizeof *h->head);
    h->tail = calloc(size, sizeof *h->tail);
    if (!h->head || !h->tail) {
        hub_free(h);
        return NULL;
    }
    return h;
}

static vkt_world *world_new(hub *h, uint32_t rank, double timeout)
{
    vkt_world *w = calloc(1, sizeof *w);
    struct world_impl *m = calloc(1, sizeof *m);
    if (!w || !m) {
        free(w);
        free(m);
        return NULL;
    }
    m->hub = h;
    w->impl = m;
    w->rank = w->local_rank = rank;
    w->size = w->local_size = h->size;
    w->launched = h->size > 1;
    w->timeout = timeout > 0 ? timeout : DEFAULT_TIMEOUT;
    w->poll_max_us = DEFAULT_POLL_MAX_US;
    return w;
}

vkt_status world_threads_create(uint32_t n, double timeout, vkt_world **out)
{
    if (!out || n == 0 || !(timeout >= 0))
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "world_threads_create: out NULL, no rank or a bad timeout");
    memset(out, 0, n * sizeof *out);
    hub *h = hub_new(n);
    uint32_t made = 0;
    while (h && made < n && (out[made] = world_new(h, made, timeout)))
        made++;
    if (made < n) {
        for (uint32_t r = 0; r < made; r++) {
            free(out[r]->impl);
            free(out[r]);
            out[r] = NULL;
        }
        hub_free(h);
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "world_threads_create: out of memory");
    }
    h->refs = n;
    return VKT_OK;
}

/* ---- the transport's life ------------------------------------------------------ */

vkt_status world_tp_init(vkt_world *w, int *argc, char ***argv, int require_launcher)
{
    (void)argc;
    (void)argv;
    w->impl = NULL;
    if (require_launcher)
        return err_fail(w->errmsg, VKT_ERROR_STATE,
                        "world init: this is the threads test double (tests/world_threads.c): "
                        "a job of several ranks comes from world_threads_create");
    hub *h = hub_new(1);
    struct world_impl *m = h ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        hub_free(h);
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "world init: out of memory");
    }
    h->refs = 1;
    m->hub = h;
    w->impl = m;
    w->rank = w->local_rank = 0;
    w->size = w->local_size = 1;
    w->launched = 0;
    return VKT_OK;
}

void world_tp_finalize(vkt_world *w)
{
    if (!w || !w->impl)
        return;
    hub *h = w->impl->hub;
    pthread_mutex_lock(&h->lock);
    int last = --h->refs == 0;
    pthread_mutex_unlock(&h->lock);
    if (last)
        hub_free(h);
    free(w->impl);
    w->impl = NULL;
}

void world_tp_abort(vkt_world *w, int code)
{
    (void)w;
    exit(code); /* every rank is in this process */
}

vkt_status world_tp_keepalive(vkt_world *w, int on)
{
    (void)w;
    (void)on;
    return VKT_OK; /* no deadlines at the end here: nothing to keep alive */
}

int world_mpi_initialized(void) { return 0; }
int world_built_with_mpi(void) { return 0; }

void world_set_max_piece(vkt_world *w, uint64_t bytes)
{
    if (w && w->impl)
        w->impl->piece_bytes = bytes;
}

/* ---- collectives: matching, computing ----------------------------------------- */

typedef struct coll_args {
    coll_kind kind;
    elem_type type;
    world_op op;
    uint64_t n;
    void *buf;
    const void *send;
    const uint64_t *counts, *displs;
} coll_args;

static coll *coll_new(const hub *h, uint64_t seq, const coll_args *a)
{
    coll *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->seq = seq;
    c->kind = a->kind;
    c->type = a->type;
    c->op = a->op;
    c->n = a->n;
    c->here = calloc(h->size, sizeof *c->here);
    c->buf = calloc(h->size, sizeof *c->buf);
    c->send = calloc(h->size, sizeof *c->send);
    if (a->kind == C_ALLGATHERV && (c->layout = malloc(2 * h->size * sizeof *c->layout))) {
        memcpy(c->layout, a->counts, h->size * sizeof *c->layout);
        memcpy(c->layout + h->size, a->displs, h->size * sizeof *c->layout);
    }
    if (!c->here || !c->buf || !c->send || (a->kind == C_ALLGATHERV && !c->layout)) {
        coll_free(c);
        return NULL;
    }
    return c;
}

/* A rank's call that does not match the first arrival's: the collective fails. */
static void check_match(const hub *h, coll *c, uint32_t rank, const coll_args *a)
{
    if (c->error[0])
        return;
    int same = a->kind == c->kind && a->n == c->n &&
               (a->kind != C_REDUCE || (a->type == c->type && a->op == c->op));
    if (same && a->kind == C_ALLGATHERV)
        same = memcmp(c->layout, a->counts, h->size * sizeof *c->layout) == 0 &&
               memcmp(c->layout + h->size, a->displs, h->size * sizeof *c->layout) == 0;
    if (!same)
        snprintf(c->error, sizeof c->error,
                 "collective %llu: rank %u called %s (%llu, type %d, op %d), another rank %s "
                 "(%llu, type %d, op %d) (or their layouts differ): the ranks' collectives are "
                 "out of order", (unsigned long long)c->seq, rank, kind_name[a->kind],
                 (unsigned long long)a->n, (int)a->type, (int)a->op, kind_name[c->kind],
                 (unsigned long long)c->n, (int)c->type, (int)c->op);
}

#define COMBINE(T)                                                                       \
    do {                                                                                 \
        T *acc = out;                                                                    \
        const T *x = in;                                                                 \
        for (uint64_t i = 0; i < n; i++)                                                 \
            acc[i] = op == WORLD_MIN   ? (x[i] < acc[i] ? x[i] : acc[i])                 \
                     : op == WORLD_MAX ? (x[i] > acc[i] ? x[i] : acc[i])                 \
                                       : acc[i] + x[i];                                  \
    } while (0)

/* out[i] = out[i] (op) in[i]. */
static void combine(void *out, const void *in, uint64_t n, elem_type type, world_op op)
{
    if (type == E_F32)
        COMBINE(float);
    else if (type == E_U64)
        COMBINE(uint64_t);
    else
        COMBINE(double);
}

/* The last rank to arrive, lock held: the result into every rank's buffer. */
static void coll_compute(const hub *h, coll *c)
{
    uint32_t R = h->size;
    if (c->error[0])
        return;
    switch (c->kind) {
    case C_REDUCE: {
        uint64_t bytes = c->n * elem_size[c->type];
        void *acc = malloc(bytes ? bytes : 1);
        if (!acc) {
            snprintf(c->error, sizeof c->error, "out of host memory for an allreduce");
            return;
        }
        memcpy(acc, c->buf[0], bytes);
        for (uint32_t r = 1; r < R; r++) /* rank order: the same bits for everyone */
            combine(acc, c->buf[r], c->n, c->type, c->op);
        for (uint32_t r = 0; r < R; r++)
            memcpy(c->buf[r], acc, bytes);
        free(acc);
        break;
    }
    case C_BCAST:
        for (uint32_t r = 1; r < R; r++)
            memcpy(c->buf[r], c->buf[0], c->n);
        break;
    case C_GATHER:
        for (uint32_t r = 0; r < R; r++)
            memmove((char *)c->buf[0] + r * c->n, c->send[r], c->n);
        break;
    case C_ALLGATHERV: {
        const uint64_t *counts = c->layout, *displs = c->layout + R;
        for (uint32_t dst = 0; dst < R; dst++)
            for (uint32_t src = 0; src < R; src++)
                if (src != dst && counts[src])
                    memcpy((float *)c->buf[dst] + displs[src],
                           (const float *)c->buf[src] + displs[src],
                           counts[src] * sizeof(float));
        break;
    }
    case C_BARRIER:
        break;
    }
}

/* Deposits this rank's part of its next collective; the last to arrive completes it. */
static vkt_status coll_start(vkt_world *w, const coll_args *a, const char *what,
                             uint64_t bytes, world_req **out)
{
    *out = NULL;
    hub *h = w->impl->hub;
    world_req *req = calloc(1, sizeof *req);
    if (!req)
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    snprintf(req->what, sizeof req->what, "%s", what);
    req->bytes = bytes;
    pthread_mutex_lock(&h->lock);
    uint64_t seq = w->impl->seq;
    coll *c = h->colls;
    while (c && c->seq != seq)
        c = c->next;
    if (!c && (c = coll_new(h, seq, a))) {
        c->next = h->colls;
        h->colls = c;
    }
    if (!c) {
        pthread_mutex_unlock(&h->lock);
        free(req);
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    w->impl->seq++;
    check_match(h, c, w->rank, a);
    c->buf[w->rank] = a->buf;
    c->send[w->rank] = a->send;
    c->here[w->rank] = 1;
    c->arrived++;
    c->held++;
    if (c->arrived == h->size) {
        coll_compute(h, c);
        c->done = 1;
        pthread_cond_broadcast(&h->done);
    }
    pthread_mutex_unlock(&h->lock);
    req->c = c;
    *out = req;
    return VKT_OK;
}

/* Lock held, the collective done: this rank's request lets go of it. */
static void coll_release(hub *h, coll *c)
{
    if (--c->held || !c->done)
        return;
    coll **p = &h->colls;
    while (*p != c)
        p = &(*p)->next;
    *p = c->next;
    coll_free(c);
}

/* Lock held, the request's collective done: frees it; 1, or -1 with the message. */
static int req_finish(vkt_world *w, world_req *req, char *error, size_t cap)
{
    hub *h = w->impl->hub;
    int bad = req->c->error[0] != 0;
    if (bad)
        snprintf(error, cap, "%s: %s", req->what, req->c->error);
    coll_release(h, req->c);
    free(req);
    return bad ? -1 : 1;
}

/* Lock held: matches this rank's posted receives, oldest first, with the oldest message
 * of each one's tag from its source (MPI's matching order); the matched leave the list.
 * Returns req->matched: 1 matched, 0 not yet, -1 matched with an error (req->error). */
static int recv_take(vkt_world *w, world_req *req)
{
    hub *h = w->impl->hub;
    world_req **at = &w->impl->posted;
    while (*at) {
        world_req *q = *at;
        msg *m, *prev = NULL;
        for (m = h->head[w->rank]; m && (m->tag != q->tag || m->src != q->src);
             m = m->next)
            prev = m;
        if (!m) {
            at = &q->next_posted;
            continue;
        }
        if (prev)
            prev->next = m->next;
        else
            h->head[w->rank] = m->next;
        if (h->tail[w->rank] == m)
            h->tail[w->rank] = prev;
        q->matched = 1;
        if (m->bytes != q->bytes) {
            snprintf(q->error, sizeof q->error, "receive: a message of %llu bytes (tag "
                     "%d) from rank %u; %llu expected", (unsigned long long)m->bytes, m->tag,
                     m->src, (unsigned long long)q->bytes);
            q->matched = -1;
        } else if (m->bytes)
            memcpy(q->buf, m->data, m->bytes);
        free(m);
        *at = q->next_posted;
    }
    return req->matched;
}

/* The wait's deadline, w->timeout from now, for pthread_cond_timedwait. */
static struct timespec deadline(const vkt_world *w)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double s = (double)until.tv_sec + until.tv_nsec * 1e-9 + w->timeout;
    until.tv_sec = (time_t)s;
    until.tv_nsec = (long)((s - (double)until.tv_sec) * 1e9);
    return until;
}

/* A receive's wait: until its message is in the mailbox (the senders signal `done`) or
 * the deadline. */
static vkt_status recv_wait(vkt_world *w, world_req *req)
{
    hub *h = w->impl->hub;
    double t0 = plat_now();
    struct timespec until = deadline(w);
    int r = 0, timed_out = 0;
    pthread_mutex_lock(&h->lock);
    while ((r = recv_take(w, req)) == 0 && !timed_out)
        timed_out = pthread_cond_timedwait(&h->done, &h->lock, &until) == ETIMEDOUT;
    pthread_mutex_unlock(&h->lock);
    w->comm_seconds += plat_now() - t0;
    if (r == 0)
        return err_fail(w->errmsg, VKT_ERROR_TIMEOUT, "step %llu: %s did not complete in "
                        "%.1f s: rank(s) %u have not arrived", (unsigned long long)w->step,
                        req->what, w->timeout, req->src);
    vkt_status st = r > 0 ? VKT_OK : err_fail(w->errmsg, VKT_ERROR_INTERNAL, "%s", req->error);
    free(req);
    return st;
}

int world_test(vkt_world *w, world_req *req)
{
    if (!req)
        return 1;
    if (req->recv) {
        pthread_mutex_lock(&w->impl->hub->lock);
        int r = recv_take(w, req);
        pthread_mutex_unlock(&w->impl->hub->lock);
        if (r < 0)
            err_fail(w->errmsg, VKT_ERROR_INTERNAL, "%s", req->error);
        if (r != 0)
            free(req);
        return r;
    }
    if (!req->c) {
        free(req);
        return 1;
    }
    hub *h = w->impl->hub;
    char error[512];
    pthread_mutex_lock(&h->lock);
    int r = req->c->done ? req_finish(w, req, error, sizeof error) : 0;
    pthread_mutex_unlock(&h->lock);
    if (r < 0)
        err_fail(w->errmsg, VKT_ERROR_INTERNAL, "%s", error);
    return r;
}

/* Ranks that have not deposited into c, as "2, 5" (lock held). */
static void missing_ranks(const hub *h, const coll *c, char *out, size_t cap)
{
    out[0] = 0;
    for (uint32_t r = 0; r < h->size; r++) {
        size_t len = strlen(out);
        if (!c->here[r] && len + 16 < cap)
            snprintf(out + len, cap - len, "%s%u", len ? ", " : "", r);
    }
}

/* Left in flight, as a timed-out wait leaves it: the hub still owns its collective. */
void world_abandon(vkt_world *w, world_req *req)
{
    (void)w;
    (void)req;
}

vkt_status world_wait(vkt_world *w, world_req *req)
{
    if (!req)
        return VKT_OK;
    if (req->recv)
        return recv_wait(w, req);
    if (!req->c) {
        free(req);
        return VKT_OK;
    }
    hub *h = w->impl->hub;
    double t0 = plat_now();
    struct timespec until = deadline(w);
    char error[512], missing[256];
    int timed_out = 0, r = 0;
    pthread_mutex_lock(&h->lock);
    while (!req->c->done && !timed_out)
        timed_out = pthread_cond_timedwait(&h->done, &h->lock, &until) == ETIMEDOUT &&
                    !req->c->done;
    if (timed_out) /* the request stays in flight, as MPI's would: the job is to end */
        missing_ranks(h, req->c, missing, sizeof missing);
    else
        r = req_finish(w, req, error, sizeof error);
    pthread_mutex_unlock(&h->lock);
    w->comm_seconds += plat_now() - t0;
    if (timed_out)
        return err_fail(w->errmsg, VKT_ERROR_TIMEOUT,
                        "step %llu: %s did not complete in %.1f s: rank(s) %s have not arrived",
                        (unsigned long long)w->step, req->what, w->timeout, missing);
    return r > 0 ? VKT_OK : err_fail(w->errmsg, VKT_ERROR_INTERNAL, "%s", error);
}

static vkt_status reduce_start(vkt_world *w, void *data, uint64_t n, elem_type type,
                               world_op op, const char *what, world_req **out)
{
    *out = NULL;
    if (n && !data)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: data is NULL", what);
    if (w->size == 1 || n == 0)
        return VKT_OK;
    coll_args a = {.kind = C_REDUCE, .type = type, .op = op, .n = n, .buf = data};
    vkt_status st = coll_start(w, &a, what, n * elem_size[type], out);
    if (st == VKT_OK)
        w->comm_bytes += n * elem_size[type];
    return st;
}

vkt_status world_iallreduce_f32(vkt_world *w, float *data, uint64_t n, const char *what,
                                world_req **out)
{
    if (!out)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: out is NULL", what);
    return reduce_start(w, data, n, E_F32, WORLD_SUM, what, out);
}

static vkt_status reduce(vkt_world *w, void *data, uint64_t n, elem_type type, world_op op,
                         const char *what)
{
    world_req *req = NULL;
    vkt_status st = reduce_start(w, data, n, type, op, what, &req);
    return st == VKT_OK ? world_wait(w, req) : st;
}

vkt_status world_allreduce_u64(vkt_world *w, uint64_t *data, uint64_t n, world_op op,
                               const char *what)
{
    return reduce(w, data, n, E_U64, op, what);
}

vkt_status world_allreduce_f64(vkt_world *w, double *data, uint64_t n, world_op op,
                               const char *what)
{
    return reduce(w, data, n, E_F64, op, what);
}

vkt_status world_allreduce_f32_plain(vkt_world *w, float *data, uint64_t n)
{
    return reduce(w, data, n, E_F32, WORLD_SUM, "plain allreduce");
}

/* Starts a collective other than a reduction and waits for it. */
static vkt_status run(vkt_world *w, const coll_args *a, const char *what, uint64_t bytes)
{
    world_req *req = NULL;
    vkt_status st = coll_start(w, a, what, bytes, &req);
    return st == VKT_OK ? world_wait(w, req) : st;
}

vkt_status world_bcast(vkt_world *w, void *data, uint64_t bytes, const char *what)
{
    if (bytes && !data)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: data is NULL", what);
    if (w->size == 1 || bytes == 0)
        return VKT_OK;
    w->comm_bytes += bytes;
    return run(w, &(coll_args){.kind = C_BCAST, .n = bytes, .buf = data}, what, bytes);
}

vkt_status world_gather(vkt_world *w, const void *send, uint64_t bytes, void *recv,
                        const char *what)
{
    if ((bytes && !send) || (w->rank == 0 && bytes && !recv))
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: a buffer is NULL", what);
    if (w->size == 1 || bytes == 0) {
        if (bytes && recv != send)
            memmove(recv, send, bytes);
        return VKT_OK;
    }
    w->comm_bytes += bytes;
    return run(w, &(coll_args){.kind = C_GATHER, .n = bytes, .buf = recv, .send = send}, what,
               bytes * w->size);
}

vkt_status world_allgatherv_f32(vkt_world *w, float *data, const uint64_t *counts,
                                const uint64_t *displs, const char *what)
{
    if (!data || !counts || !displs)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "%s: an argument is NULL", what);
    if (w->size == 1)
        return VKT_OK;
    uint64_t total = 0;
    for (uint32_t r = 0; r < w->size; r++)
        total += counts[r] * sizeof(float);
    w->comm_bytes += counts[w->rank] * sizeof(float);
    coll_args a = {.kind = C_ALLGATHERV, .buf = data, .counts = counts, .displs = displs};
    return run(w, &a, what, total);
}

vkt_status world_barrier(vkt_world *w, const char *what)
{
    if (w->size == 1)
        return VKT_OK;
    return run(w, &(coll_args){.kind = C_BARRIER}, what, 0);
}

/* ---- point to point ------------------------------------------------------------ */

static vkt_status need_peers(vkt_world *w, const char *what)
{
    return w->size > 1 ? VKT_OK
                       : err_fail(w->errmsg, VKT_ERROR_STATE,
                                  "%s: no other rank (a one-rank world)", what);
}

vkt_status world_isend(vkt_world *w, uint32_t dst, int tag, const void *buf, uint64_t bytes,
                       world_req **out)
{
    vkt_status st = world_check_send(w, dst, tag, buf, bytes, out);
    if (st == VKT_OK)
        st = need_peers(w, "send");
    if (st != VKT_OK)
        return st;
    msg *m = malloc(sizeof *m + bytes);
    world_req *req = calloc(1, sizeof *req);
    if (!m || !req) {
        free(m);
        free(req);
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "send: out of host memory");
    }
    m->next = NULL;
    m->src = w->rank;
    m->tag = tag;
    m->bytes = bytes;
    if (bytes)
        memcpy(m->data, buf, bytes);
    snprintf(req->what, sizeof req->what, "send");
    req->bytes = bytes;
    hub *h = w->impl->hub;
    pthread_mutex_lock(&h->lock);
    if (h->tail[dst])
        h->tail[dst]->next = m;
    else
        h->head[dst] = m;
    h->tail[dst] = m;
    pthread_cond_broadcast(&h->done); /* a receive may wait for it */
    pthread_mutex_unlock(&h->lock);
    w->comm_bytes += bytes;
    *out = req;
    return VKT_OK;
}

vkt_status world_try_recv(vkt_world *w, int tag, void *buf, uint64_t cap, uint32_t *out_src,
                          uint64_t *out_bytes)
{
    if (!out_src || !out_bytes || (cap && !buf))
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT, "receive: an argument is NULL");
    *out_src = UINT32_MAX;
    *out_bytes = 0;
    vkt_status st = need_peers(w, "receive");
    if (st != VKT_OK)
        return st;
    hub *h = w->impl->hub;
    msg *m = NULL, *prev = NULL;
    pthread_mutex_lock(&h->lock);
    for (m = h->head[w->rank]; m && m->tag != tag; m = m->next)
        prev = m;
    if (m) { /* the oldest of its tag: MPI's order between a pair of ranks holds */
        if (prev)
            prev->next = m->next;
        else
            h->head[w->rank] = m->next;
        if (h->tail[w->rank] == m)
            h->tail[w->rank] = prev;
    }
    pthread_mutex_unlock(&h->lock);
    if (!m)
        return VKT_OK;
    if (m->bytes > cap) {
        st = err_fail(w->errmsg, VKT_ERROR_INTERNAL,
                      "receive: a message of %llu bytes (tag %d) from rank %u exceeds the "
                      "buffer of %llu bytes", (unsigned long long)m->bytes, tag, m->src,
                      (unsigned long long)cap);
        free(m);
        return st;
    }
    if (m->bytes)
        memcpy(buf, m->data, m->bytes);
    *out_src = m->src;
    *out_bytes = m->bytes;
    free(m);
    return VKT_OK;
}

vkt_status world_irecv(vkt_world *w, uint32_t src, int tag, void *buf, uint64_t bytes,
                       world_req **out)
{
    vkt_status st = world_check_send(w, src, tag, buf, bytes, out);
    if (st == VKT_OK)
        st = need_peers(w, "receive");
    if (st != VKT_OK)
        return st;
    world_req *req = calloc(1, sizeof *req);
    if (!req)
        return err_fail(w->errmsg, VKT_ERROR_OUT_OF_MEMORY, "receive: out of host memory");
    snprintf(req->what, sizeof req->what, "receive from rank %u", src);
    req->recv = 1;
    req->src = src;
    req->tag = tag;
    req->buf = buf;
    req->bytes = bytes;
    pthread_mutex_lock(&w->impl->hub->lock); /* posted last: matched after the earlier */
    world_req **at = &w->impl->posted;
    while (*at)
        at = &(*at)->next_posted;
    *at = req;
    pthread_mutex_unlock(&w->impl->hub->lock);
    *out = req;
    return VKT_OK;
}
