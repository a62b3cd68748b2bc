"""What a Vulkan driver itself reports about its physical devices, read through the system's Vulkan
loader (libvulkan.so.1): the standard properties ggml 0.25.3 reads for its own use but does not
expose (subgroup sizes and operations, the push-constant limit, cooperative-matrix shapes, the
extensions that decide ggml's architecture class), and each device's name and type, which the
registry reads to list the software devices ggml hides.

Every value comes from the driver; a property the driver does not report (an older Vulkan version,
an extension it lacks) is None, never a guess. The loader is asked once per process.
"""
from __future__ import annotations

import functools

import cffi

_CDEF = """
typedef struct { int sType; const void *pNext; const char *pApplicationName; uint32_t applicationVersion;
                 const char *pEngineName; uint32_t engineVersion; uint32_t apiVersion; } VkApplicationInfo;
typedef struct { int sType; const void *pNext; uint32_t flags; const VkApplicationInfo *pApplicationInfo;
                 uint32_t enabledLayerCount; const char *const *ppEnabledLayerNames;
                 uint32_t enabledExtensionCount; const char *const *ppEnabledExtensionNames; } VkInstanceCreateInfo;
/* VkPhysicalDeviceLimits up to maxPushConstantsSize; its VkDeviceSize fields make it 8-byte aligned */
typedef struct { uint32_t maxImageDimension1D, maxImageDimension2D, maxImageDimension3D, maxImageDimensionCube,
                          maxImageArrayLayers, maxTexelBufferElements, maxUniformBufferRange,
                          maxStorageBufferRange, maxPushConstantsSize; uint64_t aligned; } VkLimitsHead;
/* VkPhysicalDeviceProperties (824 bytes), its tail as room to spare */
typedef struct { uint32_t apiVersion; uint32_t driverVersion; uint32_t vendorID; uint32_t deviceID;
                 int deviceType; char deviceName[256]; uint8_t pipelineCacheUUID[16]; VkLimitsHead limits;
                 uint8_t tail[2048]; } VkPropertiesHead;
typedef struct { int sType; void *pNext; VkPropertiesHead properties; } VkPhysicalDeviceProperties2;
typedef struct { int sType; void *pNext; uint32_t subgroupSize; uint32_t supportedStages;
                 uint32_t supportedOperations; uint32_t quadOperationsInAllStages; } VkPhysicalDeviceSubgroupProperties;
typedef struct { int sType; void *pNext; uint32_t minSubgroupSize; uint32_t maxSubgroupSize;
                 uint32_t maxComputeWorkgroupSubgroups; uint32_t requiredSubgroupSizeStages; }
        VkPhysicalDeviceSubgroupSizeControlProperties;
typedef struct { char extensionName[256]; uint32_t specVersion; } VkExtensionProperties;
typedef struct { int sType; void *pNext; uint32_t MSize; uint32_t NSize; uint32_t KSize; int AType; int BType;
                 int CType; int ResultType; uint32_t saturatingAccumulation; int scope; }
        VkCooperativeMatrixPropertiesKHR;
typedef int (*PFN_coopmat_props)(void *device, uint32_t *count, VkCooperativeMatrixPropertiesKHR *props);
int vkEnumerateInstanceVersion(uint32_t *version);
int vkCreateInstance(const VkInstanceCreateInfo *info, const void *allocator, void **instance);
void vkDestroyInstance(void *instance, const void *allocator);
int vkEnumeratePhysicalDevices(void *instance, uint32_t *count, void **devices);
void vkGetPhysicalDeviceProperties2(void *device, VkPhysicalDeviceProperties2 *props);
int vkEnumerateDeviceExtensionProperties(void *device, const char *layer, uint32_t *count,
                                         VkExtensionProperties *props);
void *vkGetInstanceProcAddr(void *instance, const char *name);
"""

_ST_APP, _ST_INSTANCE = 0, 1
_ST_PROPS2 = 1000059001
_ST_SUBGROUP = 1000094000
_ST_SUBGROUP_SIZE_CONTROL = 1000225000
_ST_COOPMAT = 1000506001
_VOTE, _SHUFFLE = 0x2, 0x10  # VkSubgroupFeatureFlagBits
_V1_1, _V1_3 = (1 << 22) | (1 << 12), (1 << 22) | (3 << 12)
_SUCCESS, _INCOMPLETE = 0, 5
COMPONENT_TYPES = {0: "f16", 1: "f32", 2: "f64", 3: "i8", 4: "i16", 5: "i32", 6: "i64", 7: "u8", 8: "u16",
                   9: "u32", 10: "u64", 1000141000: "bf16", 1000491002: "e4m3", 1000491003: "e5m2"}
SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue_family"}
DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
VENDOR_AMD, VENDOR_INTEL, VENDOR_NVIDIA, VENDOR_QUALCOMM = 0x1002, 0x8086, 0x10DE, 0x5143


def _arch(vendor: int, extensions: set) -> str | None:
    """ggml's architecture class (vk_device_architecture) where the rule ggml applies reads only the
    vendor and the extension list; None where it reads further properties (AMD's and Intel's
    subgroup and shader-core properties, NVIDIA's SM builtins, Qualcomm's)."""
    if vendor not in (VENDOR_AMD, VENDOR_INTEL, VENDOR_NVIDIA, VENDOR_QUALCOMM):
        return "OTHER"
    if vendor == VENDOR_NVIDIA and "VK_KHR_cooperative_matrix" not in extensions:
        return "NVIDIA_PRE_TURING"
    return None


def _extensions(ffi, vk, dev) -> set:
    n = ffi.new("uint32_t *")
    if vk.vkEnumerateDeviceExtensionProperties(dev, ffi.NULL, n, ffi.NULL) != _SUCCESS:
        return set()
    props = ffi.new("VkExtensionProperties[]", n[0])
    if vk.vkEnumerateDeviceExtensionProperties(dev, ffi.NULL, n, props) not in (_SUCCESS, _INCOMPLETE):
        return set()
    return {ffi.string(props[i].extensionName).decode(errors="replace") for i in range(n[0])}


def _coopmat_shapes(ffi, vk, inst, dev) -> list:
    fn = vk.vkGetInstanceProcAddr(inst, b"vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    if fn == ffi.NULL:
        return []
    fn = ffi.cast("PFN_coopmat_props", fn)
    n = ffi.new("uint32_t *")
    if fn(dev, n, ffi.NULL) != _SUCCESS or n[0] == 0:
        return []
    props = ffi.new("VkCooperativeMatrixPropertiesKHR[]", n[0])
    for i in range(n[0]):
        props[i].sType = _ST_COOPMAT
    if fn(dev, n, props) not in (_SUCCESS, _INCOMPLETE):
        return []

    def kind(t):
        return COMPONENT_TYPES.get(t, str(t))
    return [{"m": p.MSize, "n": p.NSize, "k": p.KSize, "a": kind(p.AType), "b": kind(p.BType),
             "c": kind(p.CType), "result": kind(p.ResultType), "saturating": bool(p.saturatingAccumulation),
             "scope": SCOPES.get(p.scope, str(p.scope))} for p in (props[i] for i in range(n[0]))]


def _device_properties(ffi, vk, inst, dev, instance_version: int) -> dict:
    extensions = _extensions(ffi, vk, dev)
    sub = ffi.new("VkPhysicalDeviceSubgroupProperties *", {"sType": _ST_SUBGROUP})
    size_ctl = ffi.new("VkPhysicalDeviceSubgroupSizeControlProperties *", {"sType": _ST_SUBGROUP_SIZE_CONTROL})
    head = ffi.new("VkPhysicalDeviceProperties2 *", {"sType": _ST_PROPS2})
    vk.vkGetPhysicalDeviceProperties2(dev, head)  # the device's Vulkan version decides what may be chained
    version = head.properties.apiVersion
    out = {"name": ffi.string(head.properties.deviceName).decode(errors="replace"),
           "type": DEVICE_TYPES.get(head.properties.deviceType, "other"),
           "vendor_id": head.properties.vendorID, "device_id": head.properties.deviceID,
           "api_version": f"{version >> 22}.{(version >> 12) & 0x3FF}.{version & 0xFFF}",
           "max_push_constants_size": head.properties.limits.maxPushConstantsSize,
           "subgroup_size": None, "subgroup_vote": None, "subgroup_shuffle": None,
           "subgroup_min_size": None, "subgroup_max_size": None,
           "coopmat_shapes": None, "arch": _arch(head.properties.vendorID, extensions),
           "extensions": frozenset(extensions)}
    if version < _V1_1:  # the subgroup properties are Vulkan 1.1
        return out
    props = ffi.new("VkPhysicalDeviceProperties2 *", {"sType": _ST_PROPS2, "pNext": sub})
    if min(version, instance_version) >= _V1_3 or "VK_EXT_subgroup_size_control" in extensions:
        sub.pNext = size_ctl
    vk.vkGetPhysicalDeviceProperties2(dev, props)
    out.update(subgroup_size=sub.subgroupSize, subgroup_vote=bool(sub.supportedOperations & _VOTE),
               subgroup_shuffle=bool(sub.supportedOperations & _SHUFFLE))
    if sub.pNext != ffi.NULL:
        out.update(subgroup_min_size=size_ctl.minSubgroupSize, subgroup_max_size=size_ctl.maxSubgroupSize)
    if "VK_KHR_cooperative_matrix" in extensions:
        out["coopmat_shapes"] = _coopmat_shapes(ffi, vk, inst, dev)
    return out


@functools.lru_cache(maxsize=1)
def physical_device_properties() -> tuple:
    """One dict per physical device, in the loader's order (the indices GGML_VK_VISIBLE_DEVICES
    uses); empty without a Vulkan loader or driver."""
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    try:
        vk = ffi.dlopen("libvulkan.so.1")
    except OSError:
        return ()
    loader = ffi.new("uint32_t *", _V1_1)
    try:
        vk.vkEnumerateInstanceVersion(loader)
    except AttributeError:  # a Vulkan 1.0 loader
        return ()
    instance_version = min(loader[0], _V1_3)
    app = ffi.new("VkApplicationInfo *", {"sType": _ST_APP, "apiVersion": instance_version})
    info = ffi.new("VkInstanceCreateInfo *", {"sType": _ST_INSTANCE, "pApplicationInfo": app})
    inst = ffi.new("void **")
    if vk.vkCreateInstance(info, ffi.NULL, inst) != _SUCCESS:
        return ()
    try:
        n = ffi.new("uint32_t *")
        if vk.vkEnumeratePhysicalDevices(inst[0], n, ffi.NULL) != _SUCCESS or n[0] == 0:
            return ()
        handles = ffi.new("void *[]", n[0])
        if vk.vkEnumeratePhysicalDevices(inst[0], n, handles) not in (_SUCCESS, _INCOMPLETE):
            return ()
        return tuple(_device_properties(ffi, vk, inst[0], handles[i], instance_version) for i in range(n[0]))
    finally:
        vk.vkDestroyInstance(inst[0], ffi.NULL)
