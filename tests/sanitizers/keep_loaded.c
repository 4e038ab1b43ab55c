/* Linked into every executable of the AddressSanitizer build (VKT_ASAN), nowhere else.
 *
 * LeakSanitizer checks for leaks at exit, when the Vulkan loader has long since unloaded
 * the driver (lavapipe and the LLVM it pulls in) at vkDestroyInstance, and Open MPI its
 * components at MPI_Finalize. Memory those libraries keep in their own globals for the
 * life of the process then looks leaked, and its allocation stack points into code that
 * is no longer mapped: "(<unknown module>)", which no suppression can name.
 *
 * This dlclose, exported from the executable (-Wl,--export-dynamic-symbol=dlclose), comes
 * first in the symbol lookup and keeps every library loaded until exit, as if opened with
 * RTLD_NODELETE: memory a library still holds stays reachable from its globals, and what
 * it really leaks is reported with its frames named, so tests/sanitizers/lsan.supp can
 * suppress it by library. Our own dlclose calls (a rejected loader) change no result. */
int dlclose(void *handle);

int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
