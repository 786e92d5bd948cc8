//go:build darwin && arm64 && cgo

package vz

// The shim: the one file over Virtualization.framework (through
// github.com/Code-Hex/vz/v3). It only turns a bundle into a VM
// configuration and a VM into a Machine; every decision is elsewhere, in
// pure Go. shimcheck_test.go type-checks it on Linux against vz's source.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	vzf "github.com/Code-Hex/vz/v3"
)

// Available reports whether this build has the shim over
// Virtualization.framework.
const Available = true

// DataShareTag is the virtio-fs tag of the workload's data directory: a
// Linux guest mounts it with `mount -t virtiofs einsora-data /data`.
const DataShareTag = "einsora-data"

// NewHypervisor returns Virtualization.framework.
func NewHypervisor() (Hypervisor, error) { return framework{}, nil }

type framework struct{}

func (framework) Boot(ctx context.Context, b Bundle, cfg *Config) (Machine, error) {
	var boot vzf.BootLoader
	var platform vzf.PlatformConfiguration
	var err error
	switch cfg.Guest {
	case GuestMacOS:
		platform, err = macPlatform(b, nil)
		if err == nil {
			boot, err = vzf.NewMacOSBootLoader()
		}
	default:
		platform, boot, err = linuxPlatform(b)
	}
	if err != nil {
		return nil, err
	}
	vm, err := newVM(b, cfg, boot, platform, cfg.CPUs, cfg.MemoryMB)
	if err != nil {
		return nil, err
	}
	if err := vm.Start(); err != nil {
		return nil, classify(fmt.Errorf("start: %w", err))
	}
	m := &machine{vm: vm, done: make(chan struct{})}
	go m.watch()
	return m, nil
}

func (framework) InstallMacOS(ctx context.Context, b Bundle, cfg *Config, ipsw string, progress func(int)) error {
	img, err := vzf.LoadMacOSRestoreImageFromPath(ipsw)
	if err != nil {
		return fmt.Errorf("load IPSW %s: %w", ipsw, err)
	}
	req := img.MostFeaturefulSupportedConfiguration()
	if req == nil {
		return fmt.Errorf("IPSW %s (macOS %s) is not supported on this Mac", ipsw, img.OperatingSystemVersion())
	}
	hw := req.HardwareModel()
	if !hw.Supported() {
		return fmt.Errorf("IPSW %s: its hardware model is not supported on this Mac", ipsw)
	}
	if err := os.WriteFile(b.HardwareModel(), hw.DataRepresentation(), 0o600); err != nil {
		return err
	}
	id, err := vzf.NewMacMachineIdentifier()
	if err != nil {
		return err
	}
	if err := os.WriteFile(b.MachineID(), id.DataRepresentation(), 0o600); err != nil {
		return err
	}
	if _, err := vzf.NewMacAuxiliaryStorage(b.AuxStorage(), vzf.WithCreatingMacAuxiliaryStorage(hw)); err != nil {
		return fmt.Errorf("aux storage: %w", err)
	}
	disk, err := os.OpenFile(b.Disk(), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := disk.Truncate(cfg.DiskBytes); err != nil {
		disk.Close()
		return err
	}
	if err := disk.Close(); err != nil {
		return err
	}
	platform, err := macPlatform(b, hw)
	if err != nil {
		return err
	}
	boot, err := vzf.NewMacOSBootLoader()
	if err != nil {
		return err
	}
	cpus := max(cfg.CPUs, int(req.MinimumSupportedCPUCount()))
	mem := max(cfg.MemoryMB, int(req.MinimumSupportedMemorySize()>>20))
	vm, err := newVM(b, cfg, boot, platform, cpus, mem)
	if err != nil {
		return err
	}
	inst, err := vzf.NewMacOSInstaller(vm, ipsw)
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-inst.Done():
				return
			case <-t.C:
				progress(int(inst.FractionCompleted() * 100))
			}
		}
	}()
	return classify(inst.Install(ctx))
}

// macPlatform is a macOS guest's platform from the bundle; hw, when set,
// is the hardware model just written.
func macPlatform(b Bundle, hw *vzf.MacHardwareModel) (vzf.PlatformConfiguration, error) {
	var err error
	if hw == nil {
		if hw, err = vzf.NewMacHardwareModelWithDataPath(b.HardwareModel()); err != nil {
			return nil, fmt.Errorf("hardware model: %w", err)
		}
	}
	id, err := vzf.NewMacMachineIdentifierWithDataPath(b.MachineID())
	if err != nil {
		return nil, fmt.Errorf("machine identifier: %w", err)
	}
	aux, err := vzf.NewMacAuxiliaryStorage(b.AuxStorage())
	if err != nil {
		return nil, fmt.Errorf("aux storage: %w", err)
	}
	return vzf.NewMacPlatformConfiguration(vzf.WithMacHardwareModel(hw), vzf.WithMacMachineIdentifier(id), vzf.WithMacAuxiliaryStorage(aux))
}

// linuxPlatform is a Linux guest's: a generic platform with the machine
// identifier and EFI store kept in the bundle, made on first boot.
func linuxPlatform(b Bundle) (vzf.PlatformConfiguration, vzf.BootLoader, error) {
	var id *vzf.GenericMachineIdentifier
	var err error
	if _, serr := os.Stat(b.MachineID()); serr == nil {
		id, err = vzf.NewGenericMachineIdentifierWithDataPath(b.MachineID())
	} else {
		id, err = vzf.NewGenericMachineIdentifier()
		if err == nil {
			err = os.WriteFile(b.MachineID(), id.DataRepresentation(), 0o600)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("machine identifier: %w", err)
	}
	platform, err := vzf.NewGenericPlatformConfiguration(vzf.WithGenericMachineIdentifier(id))
	if err != nil {
		return nil, nil, err
	}
	var store *vzf.EFIVariableStore
	if _, serr := os.Stat(b.EFIVars()); serr == nil {
		store, err = vzf.NewEFIVariableStore(b.EFIVars())
	} else {
		store, err = vzf.NewEFIVariableStore(b.EFIVars(), vzf.WithCreatingEFIVariableStore())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("EFI variable store: %w", err)
	}
	boot, err := vzf.NewEFIBootLoader(vzf.WithEFIVariableStore(store))
	if err != nil {
		return nil, nil, err
	}
	return platform, boot, nil
}

// newVM configures the devices every guest gets: the disk on virtio-blk,
// NAT with the bundle's MAC, the serial console to console.log, the data
// directory over virtio-fs, entropy.
func newVM(b Bundle, cfg *Config, boot vzf.BootLoader, platform vzf.PlatformConfiguration, cpus, memMB int) (*vzf.VirtualMachine, error) {
	c, err := vzf.NewVirtualMachineConfiguration(boot, uint(max(cpus, 1)), uint64(max(memMB, 512))<<20)
	if err != nil {
		return nil, err
	}
	c.SetPlatformVirtualMachineConfiguration(platform)

	att, err := vzf.NewDiskImageStorageDeviceAttachment(b.Disk(), false)
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	blk, err := vzf.NewVirtioBlockDeviceConfiguration(att)
	if err != nil {
		return nil, err
	}
	c.SetStorageDevicesVirtualMachineConfiguration([]vzf.StorageDeviceConfiguration{blk})

	macText, err := ReadMAC(b)
	if err != nil {
		return nil, err
	}
	hwAddr, err := net.ParseMAC(macText)
	if err != nil {
		return nil, fmt.Errorf("mac %q: %w", macText, err)
	}
	mac, err := vzf.NewMACAddress(hwAddr)
	if err != nil {
		return nil, err
	}
	nat, err := vzf.NewNATNetworkDeviceAttachment()
	if err != nil {
		return nil, err
	}
	nic, err := vzf.NewVirtioNetworkDeviceConfiguration(nat)
	if err != nil {
		return nil, err
	}
	nic.SetMACAddress(mac)
	c.SetNetworkDevicesVirtualMachineConfiguration([]*vzf.VirtioNetworkDeviceConfiguration{nic})

	console, err := vzf.NewFileSerialPortAttachment(b.Console(), true)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	serial, err := vzf.NewVirtioConsoleDeviceSerialPortConfiguration(console)
	if err != nil {
		return nil, err
	}
	c.SetSerialPortsVirtualMachineConfiguration([]*vzf.VirtioConsoleDeviceSerialPortConfiguration{serial})

	dir, err := vzf.NewSharedDirectory(b.Data(), false)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	share, err := vzf.NewSingleDirectoryShare(dir)
	if err != nil {
		return nil, err
	}
	fs, err := vzf.NewVirtioFileSystemDeviceConfiguration(DataShareTag)
	if err != nil {
		return nil, err
	}
	fs.SetDirectoryShare(share)
	c.SetDirectorySharingDevicesVirtualMachineConfiguration([]vzf.DirectorySharingDeviceConfiguration{fs})

	entropy, err := vzf.NewVirtioEntropyDeviceConfiguration()
	if err != nil {
		return nil, err
	}
	c.SetEntropyDevicesVirtualMachineConfiguration([]*vzf.VirtioEntropyDeviceConfiguration{entropy})

	if ok, err := c.Validate(); !ok || err != nil {
		return nil, fmt.Errorf("configuration refused: %w", err)
	}
	vm, err := vzf.NewVirtualMachine(c)
	if err != nil {
		return nil, classify(err)
	}
	return vm, nil
}

// classify marks the OS's refusal for too many VMs as ErrLimitExceeded.
func classify(err error) error {
	var ns *vzf.NSError
	if errors.As(err, &ns) && strings.HasSuffix(ns.Domain, "VZErrorDomain") && ns.Code == int(vzf.ErrorVirtualMachineLimitExceeded) {
		return fmt.Errorf("%w: %v", ErrLimitExceeded, err)
	}
	return err
}

// machine is a running VM.
type machine struct {
	vm   *vzf.VirtualMachine
	once sync.Once
	done chan struct{}
	err  error
}

func (m *machine) watch() {
	for st := range m.vm.StateChangedNotify() {
		switch st {
		case vzf.VirtualMachineStateStopped:
			m.end(nil)
			return
		case vzf.VirtualMachineStateError:
			m.end(errors.New("the VM entered the error state"))
			return
		}
	}
}

func (m *machine) end(err error) { m.once.Do(func() { m.err = err; close(m.done) }) }

func (m *machine) RequestStop() error {
	ok, err := m.vm.RequestStop()
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the guest cannot be asked to stop")
	}
	return nil
}

func (m *machine) ForceStop() error      { return m.vm.Stop() }
func (m *machine) Done() <-chan struct{} { return m.done }
func (m *machine) Err() error            { return m.err }
