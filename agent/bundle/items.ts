/**
 * What a bundle holds, as data (collectors as data, like troubleshoot.sh): one table of items,
 * grouped in the EKS log collector's top-level folders so people who know those bundles find
 * their way. The engine (bundle.ts) knows how to collect each kind; this file only says what.
 */

export type Fallback =
  | { kind: 'proc'; src: string }
  | { kind: 'generate'; gen: GeneratorName };

export type GeneratorName =
  | 'sysctl-from-proc' | 'ps-from-proc' | 'df-from-statfs' | 'allprocstat' | 'io-throttling' | 'cpu-throttling'
  | 'pullwatch-ingests' | 'os-summary';

export type ItemSpec =
  /** One host file (path relative to the host root). `timestamped`: apply the time window to its lines. */
  | { kind: 'file'; path: string; src: string; timestamped?: boolean }
  /** Files matching wildcard patterns under a host directory, kept with their relative paths under `into`. */
  | { kind: 'glob'; into: string; base: string; patterns: string[]; recursive?: boolean; timestamped?: boolean; maxFiles?: number }
  /** A command, run in the host's namespaces (nsenter) when possible, else with this image's tools. */
  | { kind: 'command'; path: string; argv: string[]; fallback?: Fallback; needs?: 'containerd-socket' }
  /** A /proc or /sys file, read directly (size unknown up front: buffered up to the cap). */
  | { kind: 'proc'; path: string; src: string }
  /** journalctl over the bundle window; `units` empty = whole journal; `kernel` = -k. */
  | { kind: 'journal'; path: string; units: string[]; kernel?: boolean }
  /** Computed by pullwatch itself. */
  | { kind: 'generate'; path: string; gen: GeneratorName }
  /** Expanded at run time into more items (per interface, per table, per mount, …). */
  | { kind: 'expand'; expand: ExpanderName };

export type ExpanderName =
  | 'iptables' | 'ethtool' | 'xfs' | 'containerd-stacks' | 'pullwatch-agent' | 'pullwatch-captures' | 'gpu' | 'overlay-usage';

const cmd = (path: string, argv: string[], fallback?: Fallback): ItemSpec => (fallback ? { kind: 'command', path, argv, fallback } : { kind: 'command', path, argv });
const ctr = (path: string, args: string[]): ItemSpec => ({ kind: 'command', path, argv: ['ctr', ...args], needs: 'containerd-socket' });

/** Node-critical pods whose logs the EKS collector keeps (plus common CNIs and pullwatch itself). */
export const CRITICAL_POD_PATTERNS = [
  'kube-system_aws-node*', 'kube-system_cni-metrics-helper*', 'kube-system_coredns*', 'kube-system_kube-proxy*',
  'kube-system_ebs-csi*', 'kube-system_efs-csi*', 'kube-system_fsx-csi*', 'kube-system_fsx-openzfs-csi*',
  'kube-system_file-cache-csi*', 'kube-system_s3-csi*', 'mount-s3_*', 'kube-system_eks-pod-identity-agent*',
  'kube-system_eks-node-monitoring-agent*', 'kube-system_kube-multus*', 'kube-system_cilium*', 'kube-system_calico*',
  'calico-system_*', 'kube-flannel_*', 'kube-system_konnectivity-agent*', '*_pullwatch-agent*',
];

export const ITEMS: ItemSpec[] = [
  // system/
  { kind: 'generate', path: 'system/summary.txt', gen: 'os-summary' },
  { kind: 'file', path: 'system/os-release', src: '/etc/os-release' },
  { kind: 'file', path: 'system/instance-id.txt', src: '/var/lib/cloud/data/instance-id' },
  cmd('system/uname.txt', ['uname', '-a'], { kind: 'proc', src: '/proc/version' }),
  { kind: 'proc', path: 'system/uptime.txt', src: '/proc/uptime' },
  { kind: 'proc', path: 'system/loadavg.txt', src: '/proc/loadavg' },
  { kind: 'proc', path: 'system/meminfo.txt', src: '/proc/meminfo' },
  { kind: 'proc', path: 'system/procstat.txt', src: '/proc/stat' },
  { kind: 'proc', path: 'system/pressure-cpu.txt', src: '/proc/pressure/cpu' },
  { kind: 'proc', path: 'system/pressure-io.txt', src: '/proc/pressure/io' },
  { kind: 'proc', path: 'system/pressure-memory.txt', src: '/proc/pressure/memory' },
  { kind: 'generate', path: 'system/allprocstat.txt', gen: 'allprocstat' },
  cmd('system/pkglist.txt', ['dpkg', '--list']),
  cmd('system/pkglist-rpm.txt', ['rpm', '-qa']),
  cmd('system/services.txt', ['systemctl', 'list-units', '--all', '--no-pager']),
  cmd('system/systemd-analyze.txt', ['systemd-analyze', 'blame', '--no-pager']),
  cmd('system/top.txt', ['top', '-b', '-n', '1']),
  cmd('system/ps.txt', ['ps', 'fauxwww', '--headers'], { kind: 'generate', gen: 'ps-from-proc' }),
  cmd('system/ps-threads.txt', ['ps', '-eTF', '--headers']),
  cmd('system/netstat.txt', ['netstat', '-plant']),
  cmd('system/ss.txt', ['ss', '-tanp'], { kind: 'proc', src: '/proc/net/tcp' }),
  cmd('system/selinux.txt', ['getenforce']),
  cmd('system/last_reboot.txt', ['last', 'reboot']),
  { kind: 'generate', path: 'system/cpu_throttling.txt', gen: 'cpu-throttling' },
  { kind: 'generate', path: 'system/io_throttling.txt', gen: 'io-throttling' },
  { kind: 'journal', path: 'system/journal.log', units: [] },

  // var_log/
  { kind: 'glob', into: 'var_log', base: '/var/log', patterns: ['syslog*', 'messages*', 'cron*', 'cloud-init.log*', 'cloud-init-output.log*', 'user-data.log*', 'kube-proxy.log*', 'unattended-upgrades/*.log', 'aws-routed-eni/*', 'dmesg*'], timestamped: true },
  { kind: 'glob', into: 'var_log/pods', base: '/var/log/pods', patterns: CRITICAL_POD_PATTERNS, recursive: true, timestamped: true, maxFiles: 500 },

  // kernel/
  cmd('kernel/dmesg.current', ['dmesg']),
  cmd('kernel/dmesg.human.current', ['dmesg', '--ctime']),
  { kind: 'journal', path: 'kernel/kernel-journal.log', units: [], kernel: true },
  cmd('kernel/uname.txt', ['uname', '-a'], { kind: 'proc', src: '/proc/version' }),
  { kind: 'proc', path: 'kernel/cmdline.txt', src: '/proc/cmdline' },

  // modinfo/
  cmd('modinfo/lsmod.txt', ['lsmod'], { kind: 'proc', src: '/proc/modules' }),
  cmd('modinfo/lustre', ['modinfo', 'lustre']),
  cmd('modinfo/ip_vs', ['modinfo', 'ip_vs']),
  cmd('modinfo/overlay', ['modinfo', 'overlay']),

  // storage/
  cmd('storage/mounts.txt', ['mount'], { kind: 'proc', src: '/proc/self/mounts' }),
  cmd('storage/df-h.txt', ['df', '--human-readable'], { kind: 'generate', gen: 'df-from-statfs' }),
  cmd('storage/inodes.txt', ['df', '--inodes']),
  cmd('storage/lsblk.txt', ['lsblk']),
  cmd('storage/lvs.txt', ['lvs']),
  cmd('storage/pvs.txt', ['pvs']),
  cmd('storage/vgs.txt', ['vgs']),
  { kind: 'file', path: 'storage/fstab.txt', src: '/etc/fstab' },
  { kind: 'proc', path: 'storage/diskstats.txt', src: '/proc/diskstats' },
  { kind: 'expand', expand: 'xfs' },
  { kind: 'expand', expand: 'overlay-usage' },

  // networking/
  { kind: 'expand', expand: 'iptables' },
  cmd('networking/nft-ruleset.txt', ['nft', 'list', 'ruleset']),
  cmd('networking/ipvsadm.txt', ['ipvsadm', '--save', '-n']),
  cmd('networking/ipvsadm-stats.txt', ['ipvsadm', '--list', '--numeric', '--stats', '--exact']),
  cmd('networking/ipset.txt', ['ipset', '--list']),
  cmd('networking/ipset-save.txt', ['ipset', '--save']),
  cmd('networking/conntrack-stats.txt', ['conntrack', '-S'], { kind: 'proc', src: '/proc/net/stat/nf_conntrack' }),
  cmd('networking/conntrack-count.txt', ['conntrack', '-C'], { kind: 'proc', src: '/proc/sys/net/netfilter/nf_conntrack_count' }),
  cmd('networking/ifconfig.txt', ['ifconfig']),
  cmd('networking/ipaddr.txt', ['ip', 'addr', 'show'], { kind: 'proc', src: '/proc/net/if_inet6' }),
  cmd('networking/iplink.txt', ['ip', '-s', 'link', 'show'], { kind: 'proc', src: '/proc/net/dev' }),
  cmd('networking/iprule.txt', ['ip', 'rule', 'show']),
  cmd('networking/ip6rule.txt', ['ip', '-6', 'rule', 'show']),
  cmd('networking/iproute.txt', ['ip', 'route', 'show', 'table', 'all'], { kind: 'proc', src: '/proc/net/route' }),
  cmd('networking/ip6route.txt', ['ip', '-6', 'route', 'show', 'table', 'all'], { kind: 'proc', src: '/proc/net/ipv6_route' }),
  cmd('networking/ipneigh.txt', ['ip', 'neigh', 'show'], { kind: 'proc', src: '/proc/net/arp' }),
  { kind: 'file', path: 'networking/resolv.conf', src: '/etc/resolv.conf' },
  { kind: 'file', path: 'networking/hosts', src: '/etc/hosts' },
  { kind: 'proc', path: 'networking/sockstat.txt', src: '/proc/net/sockstat' },
  { kind: 'proc', path: 'networking/netstat-counters.txt', src: '/proc/net/netstat' },
  { kind: 'proc', path: 'networking/snmp.txt', src: '/proc/net/snmp' },
  { kind: 'expand', expand: 'ethtool' },
  { kind: 'glob', into: 'networking/systemd-network', base: '/', patterns: ['etc/systemd/network/*', 'run/systemd/network/*', 'usr/lib/systemd/network/*'] },

  // containerd/
  { kind: 'expand', expand: 'containerd-stacks' },
  cmd('containerd/containerd-config.txt', ['containerd', 'config', 'dump']),
  { kind: 'file', path: 'containerd/config.toml', src: '/etc/containerd/config.toml' },
  { kind: 'glob', into: 'containerd/config.d', base: '/etc/containerd', patterns: ['conf.d/*', 'certs.d/*'], recursive: true },
  { kind: 'journal', path: 'containerd/containerd-log.txt', units: ['containerd.service'] },
  ctr('containerd/containerd-version.txt', ['version']),
  ctr('containerd/containerd-namespaces.txt', ['namespaces', 'list']),
  ctr('containerd/containerd-images.txt', ['--namespace', 'k8s.io', 'images', 'list']),
  ctr('containerd/containerd-containers.txt', ['--namespace', 'k8s.io', 'containers', 'list']),
  ctr('containerd/containerd-tasks.txt', ['--namespace', 'k8s.io', 'tasks', 'list']),
  ctr('containerd/containerd-plugins.txt', ['plugins', 'list']),
  ctr('containerd/containerd-snapshots.txt', ['--namespace', 'k8s.io', 'snapshots', 'list']),
  ctr('containerd/containerd-content-active.txt', ['--namespace', 'k8s.io', 'content', 'active']),
  ctr('containerd/containerd-leases.txt', ['--namespace', 'k8s.io', 'leases', 'list']),
  { kind: 'journal', path: 'containerd/soci-snapshotter-log.txt', units: ['soci-snapshotter.service'] },

  // docker/
  cmd('docker/docker-info.txt', ['docker', 'info']),
  cmd('docker/docker-ps.txt', ['docker', 'ps', '--all', '--no-trunc']),
  cmd('docker/docker-images.txt', ['docker', 'images']),
  cmd('docker/docker-version.txt', ['docker', 'version']),
  { kind: 'journal', path: 'docker/docker.log', units: ['docker.service'] },
  { kind: 'file', path: 'docker/daemon.json', src: '/etc/docker/daemon.json' },

  // kubelet/
  { kind: 'journal', path: 'kubelet/kubelet.log', units: ['kubelet.service'] },
  cmd('kubelet/kubelet_service.txt', ['systemctl', 'cat', 'kubelet', '--no-pager']),
  { kind: 'glob', into: 'kubelet/unit', base: '/', patterns: ['etc/systemd/system/kubelet.service', 'etc/systemd/system/kubelet.service.d/*', 'usr/lib/systemd/system/kubelet.service', 'usr/lib/systemd/system/kubelet.service.d/*', 'lib/systemd/system/kubelet.service.d/*'] },
  // kubeadm layout
  { kind: 'file', path: 'kubelet/config.yaml', src: '/var/lib/kubelet/config.yaml' },
  { kind: 'file', path: 'kubelet/kubeadm-flags.env', src: '/var/lib/kubelet/kubeadm-flags.env' },
  { kind: 'file', path: 'kubelet/kubelet-default-flags', src: '/etc/default/kubelet' },
  { kind: 'file', path: 'kubelet/kubeconfig', src: '/var/lib/kubelet/kubeconfig' },
  { kind: 'file', path: 'kubelet/kubelet.conf', src: '/etc/kubernetes/kubelet.conf' },
  // EKS AL2 / AL2023 layouts
  { kind: 'file', path: 'kubelet/kubelet-config.json', src: '/etc/kubernetes/kubelet/kubelet-config.json' },
  { kind: 'file', path: 'kubelet/config.json', src: '/etc/kubernetes/kubelet/config.json' },
  { kind: 'glob', into: 'kubelet/config.json.d', base: '/etc/kubernetes/kubelet/config.json.d', patterns: ['*'] },
  { kind: 'glob', into: 'kubelet/config.d', base: '/etc/kubernetes/kubelet', patterns: ['config.d/*', 'kubelet.conf.d/*'] },
  { kind: 'file', path: 'kubelet/eksctl-kubeconfig.yaml', src: '/etc/eksctl/kubeconfig.yaml' },
  { kind: 'glob', into: 'kubelet/image_manager', base: '/var/lib/kubelet/image_manager', patterns: ['pulling/*', 'pulled/*'], maxFiles: 200 },

  // nodeadm/ (AL2023)
  { kind: 'journal', path: 'nodeadm/nodeadm-config.log', units: ['nodeadm-config.service'] },
  { kind: 'journal', path: 'nodeadm/nodeadm-run.log', units: ['nodeadm-run.service'] },
  { kind: 'journal', path: 'sandbox-image/sandbox-image-log.txt', units: ['sandbox-image.service'] },

  // crio (when present)
  { kind: 'journal', path: 'crio/crio.log', units: ['crio.service'] },
  { kind: 'glob', into: 'crio', base: '/etc/crio', patterns: ['crio.conf', 'crio.conf.d/*'] },

  // sysctls/
  cmd('sysctls/sysctl_all.txt', ['sysctl', '--all'], { kind: 'generate', gen: 'sysctl-from-proc' }),

  // cni/
  { kind: 'glob', into: 'cni', base: '/etc/cni/net.d', patterns: ['*'], recursive: true },

  // gpu/ (only when present)
  { kind: 'expand', expand: 'gpu' },

  // pullwatch/
  { kind: 'expand', expand: 'pullwatch-agent' },
  { kind: 'generate', path: 'pullwatch/containerd-ingests.json', gen: 'pullwatch-ingests' },
  { kind: 'expand', expand: 'pullwatch-captures' },
];

export const IPTABLES_TABLES = ['filter', 'nat', 'mangle', 'raw', 'security'] as const;
