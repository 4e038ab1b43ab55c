/* abi_layout - prints, as JSON, the size of each C struct of vkt.h that the Python module
 * mirrors (python/vktrain/_lib.py) and each field's offset and size, as this compiler lays
 * them out: tests/python/test_abi.py compares them with ctypes', so a struct changed in
 * vkt.h and not in _lib.py fails a test. Every field of each struct is listed: a field added
 * to vkt.h changes the struct's size, which the test compares too.
 * Output: {"vkt_shape": {"size": 20, "fields": {"ndim": [0, 4], "dims": [4, 16]}}, ...} */
#include <stddef.h>
#include <stdio.h>

#include "vkt.h"

/* BEGIN(struct) F(field) ... END: one struct's entry */
#define BEGIN(s)                                                                          \
    {                                                                                     \
        typedef s T_;                                                                     \
        int k_ = 0;                                                                       \
        printf("%s\"%s\": {\"size\": %zu, \"fields\": {", n++ ? ",\n " : "", #s, sizeof(T_));
#define F(f)                                                                              \
    printf("%s\"%s\": [%zu, %zu]", k_++ ? ", " : "", #f, offsetof(T_, f),                 \
           sizeof(((T_ *)0)->f));
#define END                                                                               \
    printf("}}");                                                                         \
    }

int main(void)
{
    int n = 0;
    printf("{");
    BEGIN(vkt_shape) F(ndim) F(dims) END
    BEGIN(vkt_instance_options) F(enable_validation) F(loader_path) F(quiet_validation) END
    BEGIN(vkt_device_info) F(name) F(driver_name) F(driver_info) F(vendor_id) F(device_id)
        F(type) F(api_version) F(heap_count) F(heap_size) F(heap_device_local)
        F(subgroup_size) F(max_storage_buffer_range) F(max_shared_memory)
        F(max_workgroup_invocations) F(max_allocation_size) F(compute_only_queue)
        F(timestamps) F(compute_queues) F(timeline_semaphores) F(host_import) F(group)
        F(group_size) END
    BEGIN(vkt_graph_options) F(seed) END
    BEGIN(vkt_init) F(kind) F(a) F(b) F(seed) END
    BEGIN(vkt_conv2d_options) F(stride_h) F(stride_w) F(pad_h) F(pad_w) F(dilation_h)
        F(dilation_w) F(groups) END
    BEGIN(vkt_optimizer_options) F(kind) F(lr) F(momentum) F(nesterov) F(beta1) F(beta2)
        F(eps) F(weight_decay) F(clip_norm) F(grad_scale) F(schedule) F(step_size) F(gamma)
        F(warmup_steps) F(total_steps) F(min_lr) END
    BEGIN(vkt_trainer_options) F(batch) F(optimizer) F(devices) F(device_count) F(mode)
        F(kernels) F(check) F(bounded_staleness) F(staleness) F(scale_lr)
        F(scale_lr_warmup) F(balance_after) F(slow_replica) F(slow_seconds) F(world)
        F(bucket_bytes) F(overlap) F(check_identical) F(stages) F(micro_batches)
        F(divergence_growth) F(precision) F(loss_scale)
        F(loss_scale_interval) F(nonfinite_skips) F(recompute) END
    BEGIN(vkt_feed) F(tensor) F(data) END
    BEGIN(vkt_eval_result) F(loss) F(accuracy) F(count) END
    BEGIN(vkt_replica_stats) F(step_seconds) F(wait_seconds) F(data_wait_seconds) F(steps)
        F(rows) END
    BEGIN(vkt_trainer_stats) F(steps) F(step_seconds) F(host_cpu_seconds)
        F(step_dispatches) F(activation_bytes) F(activation_no_reuse_bytes) F(replicas)
        F(average_seconds) F(bytes_staged_per_step) F(staleness_mean) F(staleness_p99)
        F(staleness_max) F(updates) F(data_wait_seconds) F(replica) F(rank) F(ranks)
        F(world_replicas) F(comm_seconds) F(comm_exposed_seconds) F(comm_bytes) F(holders)
        F(submits) F(fence_waits) F(sync_transfers) F(exposed_seconds) F(average_threads)
        F(stage_cached) F(reducer) F(average_host_bytes) F(exchange) F(exchange_host_bytes)
        END
    BEGIN(vkt_pipeline_stage_stats) F(device) F(ops) F(param_bytes) F(grad_bytes)
        F(optimizer_bytes) F(activation_bytes) F(sent_bytes) F(busy_seconds)
        F(device_bytes) F(grad_reads) F(grad_writes) F(staleness_mean) F(staleness_p99)
        F(staleness_max) F(updates) F(forwards) F(kept) F(sent_host_bytes) F(overlapped) END
    BEGIN(vkt_split_options) F(stages) F(cost) F(context) F(batch) F(runs) F(tolerance)
        F(recompute) END
    BEGIN(vkt_split_stage) F(ops) F(first) F(last) F(cost) F(param_bytes) F(send_bytes) END
    BEGIN(vkt_split_report) F(stages) F(cost) F(note) F(imbalance) F(stage) END
    BEGIN(vkt_import_options) F(map) END
    BEGIN(vkt_import_report) F(loaded) F(transposed) F(kept) F(ignored) END
    printf("}\n");
    return 0;
}
