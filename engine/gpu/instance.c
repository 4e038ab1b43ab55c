/* The Vulkan instance: opening the loader at run time, optional validation layer with a
 * message counter, and the physical-device list. */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"

/* The loader stays open for the life of the process: volk's function pointers point
 * into it, and several instances may share it. */
static void *g_loader;
/* The lock around it: the platform layer's monitor, made by the first caller (the loser of
 * a race destroys its own) and kept for the process, like the loader. */
static _Atomic(plat_monitor *) g_loader_lock;

static plat_monitor *loader_lock(void)
{
    plat_monitor *m = atomic_load(&g_loader_lock);
    if (m)
        return m;
    plat_monitor *made = plat_monitor_create();
    if (!made)
        return NULL;
    if (atomic_compare_exchange_strong(&g_loader_lock, &m, made))
        return made;
    plat_monitor_destroy(made); /* another thread's is in place: m */
    return m;
}

static vkt_status open_loader(const vkt_instance_options *o, char *errmsg)
{
    const char *path = o->loader_path ? o->loader_path : plat_getenv("VKT_VULKAN_LIBRARY");
    if (!path)
        path = plat_dl_vulkan_name();
    vkt_status st = VKT_OK;
    plat_monitor *lock = loader_lock();
    if (!lock)
        return err_fail(errmsg, VKT_ERROR_OUT_OF_MEMORY, "cannot create a lock");
    plat_monitor_lock(lock);
    if (!g_loader || o->loader_path || plat_getenv("VKT_VULKAN_LIBRARY")) {
        char why[512] = "";
        void *lib = plat_dl_open(path, why, sizeof why);
        PFN_vkGetInstanceProcAddr gipa =
            lib ? (PFN_vkGetInstanceProcAddr)plat_dl_symbol(lib, "vkGetInstanceProcAddr") : NULL;
        if (!lib)
            st = err_fail(errmsg, VKT_ERROR_NO_VULKAN,
                          "cannot load the Vulkan loader '%s': %s (install a Vulkan driver and "
                          "loader, e.g. Debian's libvulkan1 and mesa-vulkan-drivers)", path, why);
        else if (!gipa) {
            plat_dl_close(lib);
            st = err_fail(errmsg, VKT_ERROR_NO_VULKAN,
                          "'%s' is not a Vulkan loader: it has no vkGetInstanceProcAddr", path);
        } else if (!g_loader) {
            g_loader = lib;
            volkInitializeCustom(gipa);
        } else if (lib != g_loader) {
            plat_dl_close(lib); /* the first loader stays in use for the process */
        } else {
            plat_dl_close(lib); /* drops the extra reference dlopen took */
        }
    }
    plat_monitor_unlock(lock);
    return st;
}

/* Validation messages the kernels' design raises without a fault, each with its reason:
 * neither counted nor printed.
 *  - Undefined-Value-StorageImage-FormatMismatch-BufferView (the layer from 1.4.30x, e.g.
 *    Debian 13's 1.4.309): the CPU-style kernels (gemm_cpu.glsl, conv_move.comp,
 *    conv_bias_grad.comp) declare an operand twice at one binding, as r32f and rgba32f
 *    storage texel buffers, and a specialization constant picks the one that matches the
 *    view the host bound (lavapipe has no shaderStorageImageReadWithoutFormat, so the
 *    format must be named). The other declaration is never executed, but the layer
 *    judges every variable the code names, without folding the specialization
 *    constants. Every variant's results are compared with the CPU references. */
static int benign_message(const VkDebugUtilsMessengerCallbackDataEXT *data)
{
    static const char *const ids[] = {"Undefined-Value-StorageImage-FormatMismatch-BufferView"};
    for (size_t i = 0; data && data->pMessageIdName && i < sizeof ids / sizeof ids[0]; i++)
        if (strcmp(data->pMessageIdName, ids[i]) == 0)
            return 1;
    return 0;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
    (void)types;
    vkt_instance *inst = user;
    if (severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT || benign_message(data))
        return VK_FALSE;
    atomic_fetch_add(&inst->validation_count, 1);
    if (!inst->quiet)
        fprintf(stderr, "vktrain: validation %s: %s\n",
                severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning",
                data && data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
}

/* Whether the validation layer offers instance extension `ext` (VK_EXT_validation_features,
 * through which synchronization validation is turned on). */
static int layer_has_extension(const char *ext)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(VALIDATION_LAYER, &n, NULL) != VK_SUCCESS || !n)
        return 0;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    int found = 0;
    if (p && vkEnumerateInstanceExtensionProperties(VALIDATION_LAYER, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = strcmp(p[i].extensionName, ext) == 0;
    free(p);
    return found;
}

static int has_layer(const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0)
        return 0;
    VkLayerProperties *p = calloc(n, sizeof *p);
    int found = 0;
    if (p && vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = strcmp(p[i].layerName, name) == 0;
    free(p);
    return found;
}

/* The loader's instance extensions as a name list for gpu_plan_instance; *names NULL
 * (n 0) when it lists none. `*props` owns the names; free it. */
static uint32_t instance_extensions(VkExtensionProperties **props, const char ***names)
{
    *props = NULL;
    *names = NULL;
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || n == 0)
        return 0;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    const char **v = calloc(n, sizeof *v);
    if (!p || !v || vkEnumerateInstanceExtensionProperties(NULL, &n, p) != VK_SUCCESS) {
        free(p);
        free(v);
        return 0; /* nothing optional enabled: still a working instance */
    }
    for (uint32_t i = 0; i < n; i++)
        v[i] = p[i].extensionName;
    *props = p;
    *names = v;
    return n;
}

static vkt_status create_vk_instance(vkt_instance *inst)
{
    uint32_t api = VK_API_VERSION_1_0;
    if (vkEnumerateInstanceVersion)
        vkEnumerateInstanceVersion(&api);
    if (api < VK_API_VERSION_1_1)
        return err_fail(inst->errmsg, VKT_ERROR_NO_DEVICE,
                        "the Vulkan loader supports only API %u.%u; vktrain needs 1.1",
                        VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api));

    const char *layers[1];
    uint32_t n_layers = 0;
    if (inst->validation) {
        if (!has_layer(VALIDATION_LAYER))
            return err_fail(inst->errmsg, VKT_ERROR_VULKAN,
                            "validation was requested but %s is not installed (Debian: "
                            "vulkan-validationlayers)", VALIDATION_LAYER);
        layers[n_layers++] = VALIDATION_LAYER;
        if (inst->validation >= 2 && !layer_has_extension(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME))
            return err_fail(inst->errmsg, VKT_ERROR_VULKAN,
                            "synchronization validation was requested but %s does not offer %s",
                            VALIDATION_LAYER, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    }
    VkExtensionProperties *props;
    const char **names;
    uint32_t n_available = instance_extensions(&props, &names);
    gpu_instance_plan plan;
    gpu_plan_instance(names, n_available, inst->validation, &plan);
    free(names);
    free(props); /* the plan's names are the string literals of gpu.h */

    VkDebugUtilsMessengerCreateInfoEXT dbg = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_validation,
        .pUserData = inst,
    };
    /* validation 2: the layer's synchronization validation too (hazards between commands
     * that no barrier orders) */
    VkValidationFeatureEnableEXT sync_feature =
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT features = {
        .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
        .pNext = &dbg, /* dbg itself is given to vkCreateDebugUtilsMessengerEXT: no pNext */
        .enabledValidationFeatureCount = 1,
        .pEnabledValidationFeatures = &sync_feature,
    };
    const void *chain = inst->validation >= 2 ? (const void *)&features
                        : inst->validation  ? (const void *)&dbg
                                            : NULL;
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "vktrain",
        .pEngineName = "vktrain",
        .engineVersion = VK_MAKE_API_VERSION(0, VKT_VERSION_MAJOR, VKT_VERSION_MINOR,
                                             VKT_VERSION_PATCH),
        .apiVersion = api >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2 : VK_API_VERSION_1_1,
    };
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = chain,
        .flags = plan.flags,
        .pApplicationInfo = &app,
        .enabledLayerCount = n_layers,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = plan.extension_count,
        .ppEnabledExtensionNames = plan.extensions,
    };
    VkResult r = vkCreateInstance(&ci, NULL, &inst->instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return err_fail(inst->errmsg, VKT_ERROR_NO_DEVICE,
                        "vkCreateInstance failed: VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan "
                        "driver found; install one, e.g. Debian's mesa-vulkan-drivers)");
    if (r != VK_SUCCESS)
        return err_fail(inst->errmsg, gpu_status_of(r), "vkCreateInstance failed: %s",
                        gpu_result_name(r));
    volkLoadInstance(inst->instance);
    if (inst->validation) {
        r = vkCreateDebugUtilsMessengerEXT(inst->instance, &dbg, NULL, &inst->messenger);
        if (r != VK_SUCCESS)
            return err_fail(inst->errmsg, gpu_status_of(r),
                            "vkCreateDebugUtilsMessengerEXT failed: %s", gpu_result_name(r));
    }
    return VKT_OK;
}

static vkt_status list_devices(vkt_instance *inst)
{
    uint32_t n = 0;
    VkResult r = vkEnumeratePhysicalDevices(inst->instance, &n, NULL);
    if (r != VK_SUCCESS)
        return err_fail(inst->errmsg, gpu_status_of(r), "vkEnumeratePhysicalDevices failed: %s",
                        gpu_result_name(r));
    if (n == 0)
        return err_fail(inst->errmsg, VKT_ERROR_NO_DEVICE,
                        "no Vulkan device found (install a driver, e.g. Debian's "
                        "mesa-vulkan-drivers for the lavapipe CPU device)");
    inst->devices = calloc(n, sizeof *inst->devices);
    inst->infos = calloc(n, sizeof *inst->infos);
    if (!inst->devices || !inst->infos)
        return err_fail(inst->errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    r = vkEnumeratePhysicalDevices(inst->instance, &n, inst->devices);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return err_fail(inst->errmsg, gpu_status_of(r), "vkEnumeratePhysicalDevices failed: %s",
                        gpu_result_name(r));
    inst->device_count = n;
    gpu_describe_devices(inst->instance, inst->devices, n, inst->infos);
    return VKT_OK;
}

/* VKT_VALIDATION: unset, empty or 0 -> 0; 1 -> 1 (the layer); sync or 2 -> 2 (its
 * synchronization check too, as enable_validation 2); anything else -> -1. */
static int validation_env(void)
{
    const char *env = plat_getenv("VKT_VALIDATION");
    if (!env || strcmp(env, "0") == 0)
        return 0;
    if (strcmp(env, "1") == 0)
        return 1;
    return strcmp(env, "sync") == 0 || strcmp(env, "2") == 0 ? 2 : -1;
}

vkt_status vkt_instance_create(const vkt_instance_options *options, vkt_instance **out)
{
    if (!out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_instance_create: out is NULL");
    *out = NULL;
    vkt_instance_options o = {0};
    if (options)
        o = *options;
    int env_level = validation_env();
    if (env_level < 0) /* a typo must not quietly drop the check asked for */
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "VKT_VALIDATION='%s': 0, 1, sync "
                        "(or 2: the layer with its synchronization check) or unset",
                        plat_getenv("VKT_VALIDATION"));
    vkt_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    int asked = o.enable_validation >= 2 ? 2 : o.enable_validation ? 1 : 0;
    inst->validation = asked > env_level ? asked : env_level;
    inst->quiet = o.quiet_validation;
    atomic_init(&inst->validation_count, 0);

    vkt_status st = open_loader(&o, inst->errmsg);
    if (st == VKT_OK)
        st = create_vk_instance(inst);
    if (st == VKT_OK)
        st = list_devices(inst);
    if (st != VKT_OK) {
        char msg[VKT_ERRMSG_SIZE];
        memcpy(msg, inst->errmsg, sizeof msg);
        vkt_instance_destroy(inst);
        return err_fail(NULL, st, "%s", msg);
    }
    *out = inst;
    return VKT_OK;
}

void vkt_instance_destroy(vkt_instance *inst)
{
    if (!inst)
        return;
    if (inst->messenger)
        vkDestroyDebugUtilsMessengerEXT(inst->instance, inst->messenger, NULL);
    if (inst->instance)
        vkDestroyInstance(inst->instance, NULL);
    free(inst->devices);
    free(inst->infos);
    free(inst);
}

const char *vkt_instance_errmsg(const vkt_instance *inst)
{
    return inst ? inst->errmsg : "vkt_instance_errmsg: instance is NULL";
}

uint64_t vkt_instance_validation_count(const vkt_instance *inst)
{
    return inst ? (uint64_t)atomic_load(&inst->validation_count) : 0;
}

uint32_t vkt_instance_device_count(const vkt_instance *inst)
{
    return inst ? inst->device_count : 0;
}

vkt_status vkt_instance_device_info(vkt_instance *inst, uint32_t index, vkt_device_info *out)
{
    if (!inst || !out)
        return err_fail(inst ? inst->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_instance_device_info: NULL argument");
    if (index >= inst->device_count)
        return err_fail(inst->errmsg, VKT_ERROR_NO_DEVICE,
                        "device index %u out of range: %u device(s) present", index,
                        inst->device_count);
    *out = inst->infos[index];
    return VKT_OK;
}
