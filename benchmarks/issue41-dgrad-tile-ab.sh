#!/usr/bin/env bash
# At 8e1a625, one GPU: LeNet with the H200 file before the tiled backward-data records (a user store
# holding 57ee81f's tuned/nvidia-h200.json, put in .device/old/ first, wins over the shipped file)
# against the one tuned with them (the shipped file); two rounds alternating, then the step's profile.
#   mkdir -p .device/old && git show 57ee81f:tuned/nvidia-h200.json > .device/old/nvidia-h200.json
#   source .device/env.sh && bash benchmarks/issue41-dgrad-tile-ab.sh
source benchmarks/entry-points.sh && mkdir -p $OUT/ab
for r in 1 2; do for v in old new; do
  if [ $v = old ]; then export AUTOGEMM_TUNED=$PWD/.device/old; else unset AUTOGEMM_TUNED; fi
  python -m nn.bench --networks lenet-b128,lenet --backends cupy-tuned --epochs 10 > $OUT/ab/bench-$v-$r.txt 2>&1
  echo "$v $r: $(grep ms/epoch $OUT/ab/bench-$v-$r.txt | tr -s ' ' | tr '\n' ';')"
done; done
for v in old new; do
  if [ $v = old ]; then export AUTOGEMM_TUNED=$PWD/.device/old; else unset AUTOGEMM_TUNED; fi
  python -m nn.profile --backend cupy-tuned --batch 128 --layers conv6x3,pool2,conv10x3,pool2,dense128,dense100,dense80 > $OUT/ab/profile-$v.txt 2>&1
  echo "$v: $(grep -h 'backward_data\|whole step' $OUT/ab/profile-$v.txt | tr -s ' ')"
done
