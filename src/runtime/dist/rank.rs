//! Where this process stands in a distributed run, from the variables its launcher sets:
//! `kiln run`'s own launcher and torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`,
//! `MASTER_PORT`, `TORCHELASTIC_USE_AGENT_STORE`), or SLURM (`SLURM_PROCID`, `SLURM_NTASKS`,
//! `SLURM_LOCALID`, with `MASTER_ADDR` and optionally `MASTER_PORT` set by the job script).

use std::env::var;

/// The port of the store when SLURM starts the ranks and `MASTER_PORT` is not set (torchrun's).
pub const DEFAULT_PORT: u16 = 29500;

/// One process of a distributed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rank {
    /// This process's rank, 0 to `world - 1`.
    pub rank: usize,
    /// The number of processes.
    pub world: usize,
    /// Its rank on this machine (NCCL uses `cuda:LOCAL_RANK`).
    pub local_rank: usize,
    /// The store's host.
    pub addr: String,
    /// The store's port.
    pub port: u16,
    /// torchrun's agent already serves the store, so every rank, rank 0 included, is a client.
    pub agent_store: bool,
    /// torchrun's restart count: a restarted group announces itself under new keys.
    pub restart: u64,
}

impl Rank {
    /// The rank the environment describes: `None` when no launcher started this process.
    pub fn from_env() -> Result<Option<Rank>, String> {
        let get = |name: &str| var(name).ok().filter(|v| !v.is_empty());
        let (rank, world, local, source) = if let Some(rank) = get("RANK") {
            let world = get("WORLD_SIZE").ok_or("`RANK` is set but `WORLD_SIZE` is not")?;
            (rank, world, get("LOCAL_RANK"), "RANK")
        } else if let Some(rank) = get("SLURM_PROCID") {
            let world =
                get("SLURM_NTASKS").ok_or("`SLURM_PROCID` is set but `SLURM_NTASKS` is not")?;
            (rank, world, get("SLURM_LOCALID"), "SLURM_PROCID")
        } else {
            return Ok(None);
        };
        let number = |name: &str, text: &str| -> Result<usize, String> {
            text.trim()
                .parse()
                .map_err(|_| format!("`{name}` is `{text}`, not a whole number"))
        };
        let rank = number(source, &rank)?;
        let world = number("the world size", &world)?;
        if world == 0 || rank >= world {
            return Err(format!(
                "rank {rank} is outside a world of {world} processes"
            ));
        }
        let local_rank = match local {
            Some(l) => number("LOCAL_RANK", &l)?,
            None => rank,
        };
        let addr = get("MASTER_ADDR").ok_or_else(|| {
            format!("`{source}` is set but `MASTER_ADDR` is not: set it to the address of the machine of rank 0")
        })?;
        let port = match get("MASTER_PORT") {
            Some(p) => p
                .trim()
                .parse()
                .map_err(|_| format!("`MASTER_PORT` is `{p}`, not a port number"))?,
            None => DEFAULT_PORT,
        };
        Ok(Some(Rank {
            rank,
            world,
            local_rank,
            addr,
            port,
            agent_store: get("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True"),
            restart: get("TORCHELASTIC_RESTART_COUNT")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0),
        }))
    }

    /// The one rank of a world of one, whose store listens on `port` of the loopback address.
    pub fn alone(port: u16) -> Rank {
        Rank {
            rank: 0,
            world: 1,
            local_rank: 0,
            addr: "127.0.0.1".into(),
            port,
            agent_store: false,
            restart: 0,
        }
    }

    /// Where this process stands, as the parallel plan holds it.
    pub fn place(&self) -> kiln::ir::Ranks {
        kiln::ir::Ranks {
            rank: self.rank,
            local_rank: self.local_rank,
            world: self.world,
        }
    }

    /// Whether this process serves the store (rank 0, unless torchrun's agent serves it).
    pub fn serves_store(&self) -> bool {
        self.rank == 0 && !self.agent_store
    }

    /// Whether every rank runs on this machine: the store's host is a loopback address (every
    /// address its name resolves to), which no other machine can reach.
    pub fn on_this_machine(&self) -> bool {
        use std::net::ToSocketAddrs;
        let Ok(addrs) = (self.addr.as_str(), self.port).to_socket_addrs() else {
            return false;
        };
        let addrs: Vec<_> = addrs.collect();
        !addrs.is_empty() && addrs.iter().all(|a| is_loopback(a.ip()))
    }

    /// The store's address, `host:port`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.addr, self.port)
    }
}

/// Whether `ip` is a loopback address, an IPv4 one written as IPv6 (`::ffff:127.0.0.1`) included.
fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// A port on the loopback address that is free now (the operating system's choice), for a store
/// that this machine serves, as torchrun's `--standalone` picks one.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(addr: &str) -> Rank {
        Rank {
            addr: addr.into(),
            ..Rank::alone(29500)
        }
    }

    /// A store on a loopback address (by number or by name) means every rank is on this
    /// machine; any other address may be reached from others.
    #[test]
    fn only_a_loopback_store_keeps_the_run_on_this_machine() {
        for local in ["127.0.0.1", "127.0.0.2", "::1", "localhost"] {
            assert!(at(local).on_this_machine(), "{local}");
        }
        for remote in ["10.1.2.3", "192.0.2.2", "0.0.0.0", "::"] {
            assert!(!at(remote).on_this_machine(), "{remote}");
        }
    }
}
