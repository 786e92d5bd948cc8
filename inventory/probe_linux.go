package inventory

func platformProbers() []prober { return linuxProbers() }
