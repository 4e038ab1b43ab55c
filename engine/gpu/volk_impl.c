/* The volk meta-loader (Debian: libvulkan-volk-dev) compiled once into the library.
 * vktrain opens the Vulkan loader itself (engine/platform) and hands volk its
 * vkGetInstanceProcAddr, so a missing loader is a clear error, not a crash. */
#include <volk.c>
