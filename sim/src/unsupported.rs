//! The calls for things a simulated GPU has not got (fans, clocks, ECC,
//! encoders...): exported, answering `NVML_ERROR_NOT_SUPPORTED` as a
//! real driver does for a board without them.

use crate::ret;
use crate::session::lib;

macro_rules! not_supported {
    ($($name:ident)*) => {$(
        /// Not supported on a simulated GPU (`NVML_ERROR_NOT_SUPPORTED`). The
        /// arguments are ignored, which the C calling convention allows.
        #[no_mangle]
        pub extern "C" fn $name() -> u32 {
            if lib().refcount == 0 { ret::UNINITIALIZED } else { ret::NOT_SUPPORTED }
        }
    )*};
}

not_supported! {
    nvmlDeviceGetFanSpeed nvmlDeviceGetFanSpeed_v2 nvmlDeviceGetNumFans
    nvmlDeviceGetTemperature nvmlDeviceGetTemperatureV nvmlDeviceGetTemperatureThreshold
    nvmlDeviceGetPowerUsage nvmlDeviceGetEnforcedPowerLimit nvmlDeviceGetPowerManagementLimit
    nvmlDeviceGetPowerManagementLimitConstraints nvmlDeviceGetPowerManagementDefaultLimit
    nvmlDeviceGetTotalEnergyConsumption nvmlDeviceGetPowerState nvmlDeviceGetPerformanceState
    nvmlDeviceGetEncoderUtilization nvmlDeviceGetDecoderUtilization
    nvmlDeviceGetJpgUtilization nvmlDeviceGetOfaUtilization
    nvmlDeviceGetEncoderSessions nvmlDeviceGetEncoderStats nvmlDeviceGetFBCStats nvmlDeviceGetFBCSessions
    nvmlDeviceGetClockInfo nvmlDeviceGetMaxClockInfo nvmlDeviceGetClock nvmlDeviceGetApplicationsClock
    nvmlDeviceGetMaxCustomerBoostClock nvmlDeviceGetSupportedMemoryClocks nvmlDeviceGetSupportedGraphicsClocks
    nvmlDeviceGetCurrentClocksThrottleReasons nvmlDeviceGetCurrentClocksEventReasons
    nvmlDeviceGetSupportedClocksThrottleReasons nvmlDeviceGetSupportedClocksEventReasons
    nvmlDeviceGetPcieThroughput nvmlDeviceGetPcieSpeed nvmlDeviceGetPcieReplayCounter
    nvmlDeviceGetCurrPcieLinkGeneration nvmlDeviceGetCurrPcieLinkWidth
    nvmlDeviceGetMaxPcieLinkGeneration nvmlDeviceGetMaxPcieLinkWidth nvmlDeviceGetGpuMaxPcieLinkGeneration
    nvmlDeviceGetDisplayActive nvmlDeviceGetDisplayMode nvmlDeviceGetPersistenceMode
    nvmlDeviceGetTotalEccErrors nvmlDeviceGetDetailedEccErrors nvmlDeviceGetEccMode
    nvmlDeviceGetMemoryErrorCounter nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPages_v2
    nvmlDeviceGetComputeMode nvmlDeviceGetCudaComputeCapability nvmlDeviceGetArchitecture
    nvmlDeviceGetProcessesUtilizationInfo nvmlDeviceGetSamples
    nvmlDeviceGetBrand nvmlDeviceGetSerial nvmlDeviceGetVbiosVersion
    nvmlDeviceGetBoardPartNumber nvmlDeviceGetBoardId nvmlDeviceGetMultiGpuBoard
    nvmlDeviceGetInforomVersion nvmlDeviceGetInforomImageVersion nvmlDeviceGetInforomConfigurationChecksum
    nvmlDeviceGetDriverModel nvmlDeviceGetDriverModel_v2 nvmlDeviceGetAccountingMode
    nvmlDeviceGetAccountingStats nvmlDeviceGetAccountingPids nvmlDeviceGetAccountingBufferSize
    nvmlDeviceGetNvLinkState nvmlDeviceGetNvLinkVersion nvmlDeviceGetNvLinkCapability
    nvmlDeviceGetNvLinkRemotePciInfo_v2 nvmlDeviceGetNvLinkErrorCounter
    nvmlDeviceGetGpuOperationMode nvmlDeviceGetVirtualizationMode nvmlDeviceGetHostVgpuMode
    nvmlDeviceGetSupportedVgpus nvmlDeviceGetCreatableVgpus nvmlDeviceGetActiveVgpus
    nvmlDeviceGetMemoryBusWidth nvmlDeviceGetNumGpuCores nvmlDeviceGetIrqNum
    nvmlDeviceGetAttributes nvmlDeviceGetAttributes_v2
    nvmlDeviceGetTopologyCommonAncestor nvmlDeviceGetTopologyNearestGpus nvmlDeviceGetP2PStatus
    nvmlDeviceGetBridgeChipInfo nvmlDeviceGetAutoBoostedClocksEnabled nvmlDeviceGetAPIRestriction
    nvmlDeviceGetViolationStatus nvmlDeviceGetGspFirmwareMode nvmlDeviceGetGspFirmwareVersion
    nvmlDeviceGetMemoryAffinity nvmlDeviceGetCpuAffinity nvmlDeviceGetCpuAffinityWithinScope
    nvmlDeviceGetDynamicPstatesInfo nvmlDeviceGetThermalSettings nvmlDeviceGetMinMaxFanSpeed
    nvmlDeviceGetTargetFanSpeed nvmlDeviceGetFanControlPolicy_v2 nvmlDeviceGetPowerSource
    nvmlDeviceGetGpcClkVfOffset nvmlDeviceGetMemClkVfOffset nvmlDeviceGetDefaultApplicationsClock
    nvmlDeviceGetComputeRunningProcessesDetail nvmlDeviceGetCurrentDriverModel
    nvmlSystemGetTopologyGpuSet nvmlSystemGetHicVersion nvmlUnitGetCount
}
