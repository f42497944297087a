#!/usr/bin/perl
# The OpenCL kernel faults of the test suite, kept out of the production
# kernels: prints kernel file ARGV[0] with each fault that applies to it put
# in as an #ifdef BT_FAULT_NAME block (the fault build, tests/c/conformance_clfault,
# defines the one BERTRAIN_CL_FAULT names: tests/c/clfault_select.c). Exits 1
# when a fault no longer applies to its file (the kernel changed: update it).
#   BIAS_ADD_OFF_BY_ONE  bias_add adds the bias of the next column (tests/opencl-fault.sh)
#   GELU_TANH_APPROX     gelu_fwd uses the tanh approximation (tests/opencl-fault.sh)
#   XENT_RACE            xent_fwd_bwd's race fixed on 2026-11-26: every work-item reads
#                        x[y], which its owner overwrites in place across barriers that
#                        fence local memory (tests/oclgrind.sh)
#   WG_ABOVE_64          the compiler rejects work-groups above 64, as some devices'
#                        compilers reject reqd_work_group_size(256) (tests/opencl-fault.sh)
use strict;
use warnings;

my %faults = (
    'kernels/dialect_opencl.cl' => [
        [ 'WG_ABOVE_64',
          qr/(#define BT_KERNEL_WG __kernel __attribute__\(\(reqd_work_group_size\(BT_WG, 1, 1\)\)\)\n)/,
          "\$1#if defined(BT_FAULT_WG_ABOVE_64) && BT_WG > 64\n"
          . "#error fault injection: work-groups above 64 are rejected\n#endif\n" ],
    ],
    'kernels/elementwise.cl' => [
        [ 'BIAS_ADD_OFF_BY_ONE',
          qr/    const float b = bias\[c\];\n/,
          "#ifdef BT_FAULT_BIAS_ADD_OFF_BY_ONE\n    const float b = bias[(c + 1) % cols];\n"
          . "#else\n    const float b = bias[c];\n#endif\n" ],
        [ 'GELU_TANH_APPROX',
          qr/(    const float xi = x\[i\];\n)(    out\[i\] = gelu_value\(xi\);\n)/,
          "\$1#ifdef BT_FAULT_GELU_TANH_APPROX\n"
          . "    out[i] = 0.5f * xi * (1.0f + tanh(0.7978845608f * (xi + 0.044715f * xi * xi * xi)));\n"
          . "#else\n\$2#endif\n" ],
    ],
    'kernels/xent.cl' => [
        [ 'XENT_RACE',
          qr{(    /\* own logits in increasing order: the first maximum, and the sum of\n)},
          "#ifdef BT_FAULT_XENT_RACE\n    const float x_y_any = x[y];\n#endif\n\$1" ],
        [ 'XENT_RACE',
          qr/(        loss\[r\] = lz - x_y;\n)/,
          "#ifdef BT_FAULT_XENT_RACE\n        loss[r] = lz - x_y_any;\n#else\n\$1#endif\n" ],
    ],
);

my $file = $ARGV[0] // die "usage: faults.pl KERNEL_FILE [PATH]\n";
my $path = $ARGV[1] // $file; # where to read it (a VPATH build's srcdir)
open my $in, '<', $path or die "faults.pl: $path: $!\n";
local $/;
my $text = <$in>;
close $in;
for my $f (@{ $faults{$file} // [] }) {
    my ($name, $re, $with) = @$f;
    my $n = 0;
    $n++ while $text =~ /$re/g;
    if ($n != 1) {
        print STDERR "faults.pl: $name: its place in $file matches $n times, not once: update tests/opencl_fault/faults.pl\n";
        exit 1;
    }
    $text =~ s/$re/"\"$with\""/ee;
}
print $text;
