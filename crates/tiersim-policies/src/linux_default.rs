//! linux_default: the kernel's default "local" policy. A page is allocated on the node of the CPU
//! that first touches it; when that node is below its low watermark the allocator falls back
//! along the distance-ordered zonelist (policies.md 1.1, from Linux 5.3 mm/page_alloc.c
//! get_page_from_freelist with node_reclaim_mode = 0). Pages never move afterwards.

use tiersim_core::{ParamSpec, Params, PluginInfo, Result};

use crate::{Policy, PolicyEntry, Topology};

const PARAMS: &[ParamSpec] = &[];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "linux_default",
        summary: "first-touch on the faulting CPU's node, fallback along the zonelist; no migration",
        source: "Linux 5.3 mm/page_alloc.c, mm/mempolicy.c (policies.md 1.1)",
        params: PARAMS,
    },
    build,
};

struct LinuxDefault;

fn build(_: &Params, _: &Topology) -> Result<Box<dyn Policy>> {
    Ok(Box::new(LinuxDefault))
}

/// Everything linux_default does is the trait's defaults.
impl Policy for LinuxDefault {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::two_socket;
    use crate::PlaceCtx;

    #[test]
    fn places_on_the_faulting_cpus_node() {
        let topo = two_socket();
        let mut p = build(&Params::defaults(PARAMS).unwrap(), &topo).unwrap();
        let free = [10, 10, 10, 10];
        for cpu in 0..8u32 {
            let local = topo.cpu_node[cpu as usize];
            let ctx = PlaceCtx { topo: &topo, cpu, local_node: local, vpn: 7, free_pages: &free, file: false };
            assert_eq!(p.place(&ctx), local);
        }
    }
}
