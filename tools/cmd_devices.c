/* vkt devices: the device table. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void print_device(uint32_t i, const vkt_device_info *d)
{
    printf("device %u: %s\n", i, d->name);
    printf("  type                    %s\n", vkt_device_type_name(d->type));
    printf("  vendor / device id      0x%04x / 0x%04x\n", d->vendor_id, d->device_id);
    printf("  driver                  %s %s\n", d->driver_name[0] ? d->driver_name : "?",
           d->driver_info);
    printf("  Vulkan API              %u.%u.%u\n", (d->api_version >> 22) & 0x7f,
           (d->api_version >> 12) & 0x3ff, d->api_version & 0xfff);
    for (uint32_t h = 0; h < d->heap_count; h++)
        printf("  memory heap %u           %.1f MiB%s\n", h,
               (double)d->heap_size[h] / (1024.0 * 1024.0),
               d->heap_device_local[h] ? " (device-local)" : "");
    printf("  subgroup size           %u\n", d->subgroup_size);
    printf("  maxStorageBufferRange   %llu bytes\n",
           (unsigned long long)d->max_storage_buffer_range);
    printf("  shared memory           %u bytes\n", d->max_shared_memory);
    printf("  workgroup invocations   %u\n", d->max_workgroup_invocations);
    printf("  max allocation          %llu bytes\n", (unsigned long long)d->max_allocation_size);
    printf("  compute-only queue      %s\n", d->compute_only_queue ? "yes" : "no");
    printf("  timestamps              %s\n", d->timestamps ? "yes" : "no");
    /* the ways of placing replicas and stages (README, "Data parallelism") */
    printf("  compute queues          %u%s\n", d->compute_queues,
           d->compute_queues > 1 ? "" : " (replicas sharing the device take turns on it)");
    printf("  timeline semaphores     %s\n", d->timeline_semaphores ? "yes" : "no");
    printf("  host memory import      %s\n", d->host_import ? "yes" : "no");
    if (d->group_size > 1)
        printf("  device group            %u, linked with %u other device(s) (vktrain does "
               "not use device groups: README)\n", d->group, d->group_size - 1);
    else if (d->group_size == 1)
        printf("  device group            %u, alone\n", d->group);
    else
        printf("  device group            unknown (the groups could not be listed)\n");
}

int cmd_devices(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    vkt_instance *inst = cli_instance();
    if (!inst)
        return 1;
    uint32_t n = vkt_instance_device_count(inst);
    for (uint32_t i = 0; i < n; i++) {
        vkt_device_info d;
        if (vkt_instance_device_info(inst, i, &d) == VKT_OK)
            print_device(i, &d);
        /* the kernel profile and each family's variant, under $VKT_KERNELS */
        char text[4096];
        vkt_status st = vkt_instance_device_kernels(inst, i, VKT_KERNELS_AUTO, text, sizeof text);
        if (st != VKT_OK) {
            cli_fail("kernel variants", st, vkt_instance_errmsg(inst));
            vkt_instance_destroy(inst);
            return 1;
        }
        for (char *line = text, *end; *line; line = end + 1) {
            end = strchr(line, '\n');
            if (!end)
                break;
            printf("  %.*s\n", (int)(end - line), line);
        }
    }
    uint32_t sel[VKT_MAX_REPLICAS], count = 0;
    vkt_status st = vkt_instance_select_devices(inst, sel, VKT_MAX_REPLICAS, &count);
    if (st != VKT_OK) {
        cli_fail("cannot select devices", st, vkt_instance_errmsg(inst));
        vkt_instance_destroy(inst);
        return 1;
    }
    printf("selected (VKT_DEVICES):");
    for (uint32_t i = 0; i < count; i++)
        printf(" %u", sel[i]);
    printf("\n");
    vkt_instance_destroy(inst);
    return 0;
}
